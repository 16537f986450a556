"""Any del_core loss inside ``transformers.Trainer``, normalised over the whole optimizer step.

    from del_core.integrations import DELTrainer
    trainer = DELTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                         loss="del", loss_weight="auto")
    trainer.train()

How a step is normalised. The Trainer draws the micro-batches of one optimizer step (its
gradient-accumulation window) in ``get_batch_samples`` before running any of them. The mixin
counts there, on the targets as the model shifts them, the non-ignored tokens and the number-token
positions of the window, and sums both over all processes with the Trainer's own collective
(``accelerator.gather``, as the Trainer sums its ``num_items_in_batch``). Every micro-batch loss is
``del_core loss(logits, targets, num_tokens=<window tokens>, num_digits=<window digits>)``: a sum
over the micro-batch's positions divided by the global counts, so the losses of all micro-batches
on all ranks add up to the loss of the whole global batch, its digit term included.

How the gradient comes out right. ``compute_loss`` returns that loss times the number of processes
R. ``loss_is_scaled_for_ga = True`` tells the Trainer not to divide by the accumulation steps (and
under DeepSpeed the Trainer passes ``scale_wrt_gas=False``), so each rank's accumulated gradient is
R x the gradient of its micro-batches' share, and DDP / DeepSpeed ZeRO average it over the R ranks:
the step's gradient is the gradient of ``loss(whole global batch)``. The logged ``loss`` (the mean
over ranks of each rank's summed returns) is the loss of the global batch; ``ce``, ``aux``,
``digit_entropy`` and ``digit_acc`` are logged beside it, over the same steps.

Under DeepSpeed Ulysses sequence parallelism (``ParallelismConfig(sp_size=N,
sp_backend="deepspeed")``) each rank holds a shard of every sequence of its group
(:mod:`del_core.integrations.sequence_parallel`): the number spans travel with the shards from the
whole sequences, the counts of the shards summed over all processes are those of the global batch,
and R is the factor DeepSpeed's gradient averaging needs under SP for its ZeRO stage
(:func:`del_core.engines.deepspeed.gradient_divisor`); the logged loss is corrected to
the global batch's.

The model runs without labels, so its forward computes no loss of its own; the Trainer's
``num_items_in_batch`` is not used (it has no digit count). With ``loss_path="logits"`` (default)
the loss takes the model's full logits [B, T, V]. With ``loss_path="chunked"`` the forward keeps the
logits of the last position only (``logits_to_keep=1``) and the loss takes the last hidden states
and the LM-head weight, ``chunk_size`` tokens at a time (``NumericLoss.from_hidden``): the fp32
[B, T, V] logits are never held (DDP, ZeRO-2, the Trainer's FSDP2, whose unit of the head keeps its
parameters unsharded from the forward to the backward, and ZeRO-3, where the loss runs as a module
of the model so that ZeRO-3 gathers the head weight for it: :mod:`del_core.integrations.zero3_head`).
Both paths are the training recipe's ``loss.path`` values, the same :class:`del_core.losses.LossPath`
objects the trainer uses; the adapter runs its model for them through
:class:`del_core.integrations.model_run.TrainerModelRun`.
Evaluation (``model.eval()``) normalises each batch by its own counts.

``loss_weight="auto"`` sets lambda as ``recipes/train.py`` does, with the same function
(:func:`del_core.losses.measure_auto_weight`): before the first optimizer step, the CE and the
weight-1 digit term of that step's global batch are measured at the initial weights (eval mode, no
gradient, RNG forked), and lambda = ``auto_ratio`` x CE / term; the lambda chosen is logged once as
``auto_loss_weight`` and kept in ``del_auto_weight``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Optional, Union

import torch
from transformers import Trainer

from del_core.config import ConfigError
from del_core.engines import deepspeed as ds
from del_core.integrations.counting import (
    TARGET_KEYS,
    WindowCounts,
    aligned_targets,
    carried_spans,
    window_target_counts,
)
from del_core.integrations.logged_metrics import LoggedMetrics
from del_core.integrations.loss_setup import resolve_loss
from del_core.integrations.model_run import TrainerModelRun
from del_core.integrations.sequence_parallel import WholeSequenceSpans
from del_core.integrations.setup_checks import (
    UnsupportedSetupError,
    argument_problems,
    compact_problems,
    head_weight,
    loss_path_problems,
    model_problems,
    parallelism_problems,
    raise_problems,
    sequence_parallel_problems,
    unsharded_head,
)
from del_core.integrations.zero3_head import HOST_NAME, ChunkedLossHost, attach_chunked_loss_host, loss_output
from del_core.losses import (
    AutoWeight,
    LossCalls,
    LossPath,
    LossSpec,
    NumericLoss,
    SequenceShard,
    build_loss_path,
    measure_auto_weight,
)
from del_core.losses.step_totals import measure_step_totals
from del_core.parallel import sequence_shard
from del_core.spans import NumberSpans
from del_core.vocab import DigitVocab


class DELTrainerMixin:
    """Put before ``transformers.Trainer`` (or a subclass such as TRL's ``SFTTrainer``) in the bases.

    Keyword arguments on top of the Trainer's:

    * ``loss``: a loss name of :func:`del_core.build_loss` (default ``"del"``), a
      :class:`del_core.losses.LossSpec` (name, weight, auto_ratio, options: the training recipe's
      ``loss`` section), or a built :class:`del_core.NumericLoss` (which then carries its own
      vocabulary and options);
    * ``loss_weight``, ``loss_options``, ``auto_ratio``: with a loss name, the rest of its
      ``LossSpec``: lambda (a number, ``"auto"``: measured on the first step's batch, see the module
      doc, or None: the loss's default), the other options of ``build_loss``, and the ratio of
      ``"auto"`` (default 0.02);
    * ``vocab``: the :class:`del_core.DigitVocab`; default: from the ``processing_class`` tokenizer;
    * ``loss_path``: ``"logits"`` (default) or ``"chunked"`` (from the last hidden states, chunk by
      chunk, never holding the [B, T, V] logits; under ZeRO-3 too), ``chunk_size`` tokens per chunk
      (256);
    * ``compact``: the path on the scored positions alone (default False): the model's forward
      keeps the last position's logits only, the last hidden states of the positions whose target
      is not -100 are gathered, and only they go through the LM head (the head module on
      ``"logits"``, the head weight chunk by chunk on ``"chunked"``) and the loss, with the same
      loss and gradients (:class:`del_core.losses.CompactedPath`; one host-device sync per
      micro-batch, for the gather's size). Refused for a model whose logits are more than the head
      module's output (``final_logit_softcapping``, ``logit_scale``, ``logits_scaling``), a head
      with a bias on ``"chunked"``, and with sequence parallelism.

    Refused with :class:`~del_core.integrations.UnsupportedSetupError` naming the setting: a
    ``compute_loss_func``, ``use_liger_kernel=True``, label smoothing, a TRL ``loss_type`` other
    than ``"nll"``, ``nn.DataParallel``, tensor and context parallelism, ``loss_weight="auto"`` with
    sequence parallelism, encoder-decoder models, and (at the first step) a forward that returns
    no logits or not one per position.

    Parallel layouts: DDP, DeepSpeed ZeRO-2/3, the Trainer's FSDP2 (``fsdp="full_shard
    auto_wrap"``, with CPU offload and LoRA), and DeepSpeed Ulysses sequence parallelism
    (``ParallelismConfig(sp_size=N, sp_backend="deepspeed")``,
    :mod:`del_core.integrations.sequence_parallel`).
    """

    loss_is_scaled_for_ga = True

    def __init__(
        self,
        *args: Any,
        loss: Union[str, LossSpec, NumericLoss] = "del",
        loss_weight: Union[float, str, None] = None,
        loss_options: Optional[dict] = None,
        auto_ratio: Optional[float] = None,
        vocab: Optional[DigitVocab] = None,
        loss_path: str = "logits",
        chunk_size: int = 256,
        compact: bool = False,
        **kwargs: Any,
    ):
        given = _bound_arguments(super().__init__, args, kwargs)
        raise_problems(argument_problems(given.get("args"), given.get("compute_loss_func")))
        super().__init__(*args, **kwargs)
        self._refuse_unsupported_setup(loss_path, chunk_size, compact)
        self.del_loss_path: LossPath = build_loss_path(loss_path, chunk_size, compact=compact)
        raise_problems(compact_problems(self.model, self.del_loss_path, self.get_sp_size()))
        self._del_host = self._chunked_loss_host()
        chosen = resolve_loss(loss, loss_weight, loss_options, auto_ratio, vocab, self.processing_class, self.model)
        self.del_loss, self.del_loss_spec = chosen.loss, chosen.spec
        auto = self.del_loss_spec is not None and self.del_loss_spec.is_auto
        self._del_sp = self.get_sp_size()
        raise_problems(sequence_parallel_problems(self._del_sp, auto, self.is_deepspeed_enabled))
        self._del_loss_scale = self._backward_scale()
        if self._del_sp > 1:
            self.data_collator = self._whole_sequence_spans(self.data_collator)
        self._del_auto_pending = auto  # lambda still to measure on the first step's batch
        self.del_auto_weight: Optional[AutoWeight] = None  # the lambda of loss_weight="auto", once measured
        self._del_window: Optional[WindowCounts] = None
        self._del_left = 0  # micro-batches of the window not yet run
        self._del_metrics = LoggedMetrics()
        self._del_loss_device: Optional[torch.device] = None
        self._del_no_cache = getattr(getattr(self.model, "config", None), "use_cache", None) is not None
        self._del_shard: Optional[SequenceShard] = None  # this rank's SequenceShard, once DeepSpeed made the group

    # --- the two steps the Trainer calls ------------------------------------------------------
    def get_batch_samples(
        self, epoch_iterator: Iterator, num_batches: int, device: torch.device
    ) -> tuple[list, Optional[Union[torch.Tensor, int]]]:
        """The Trainer's micro-batches of one optimizer step, and its ``num_items_in_batch``; also
        counts the window's tokens and digits over all ranks for :meth:`compute_loss` (a
        collective: every rank calls it once per optimizer step, as the Trainer does)."""
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        total = self.reduce_counts(window_target_counts(batch_samples, self.del_loss.vocab, device))
        self._del_window = WindowCounts(total[0], total[1], len(batch_samples))
        self._del_left = len(batch_samples)
        self.del_loss.set_step(self.state.global_step)
        if self.del_loss.needs.step_totals:
            self._measure_step_totals(batch_samples, self._del_window)
        if self._del_auto_pending:
            self._resolve_auto_weight(batch_samples, self._del_window)
        self._del_metrics.start_step()
        return batch_samples, num_items_in_batch

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: Mapping[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Optional[Union[torch.Tensor, int]] = None,
    ) -> Union[torch.Tensor, tuple[torch.Tensor, Any]]:
        """Training: R x ``loss(logits, targets, num_tokens=<window tokens>, num_digits=<window
        digits>)`` with R the number of processes (under sequence parallelism the factor of
        :meth:`_backward_scale`; see the module doc); evaluation: the loss of this batch normalised
        by its own counts. ``num_items_in_batch`` is ignored."""
        window = self._take_window() if model.training else None
        targets = aligned_targets(inputs)
        outputs, score = self._forward(model, inputs, targets, carried_spans(inputs))
        if window is None:
            loss = score().loss
        else:
            counts = self.loss_normalisers(window, targets)
            out = score(num_tokens=counts.num_tokens, num_digits=counts.num_digits)
            self._del_metrics.add(out)
            loss = out.loss * self._del_loss_scale
            if self._del_left == 0:  # the step's last micro-batch: its totals are spent
                self.del_loss.set_step_totals(None)
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: Optional[float] = None) -> None:
        """The Trainer's log, with ``ce``, ``aux``, ``digit_entropy`` and ``digit_acc`` of the
        steps since the last log added to the training logs (those that carry ``loss``)."""
        for key in ("loss", "train_loss"):
            if key in logs:
                # The Trainer averages the returned losses over the processes, whose sum is R x the
                # global batch's loss (R = the backward scale): R = processes except under sequence
                # parallelism with ZeRO-1/2, see _backward_scale.
                logs[key] *= self.accelerator.num_processes / self._del_loss_scale
        if "loss" in logs:
            gather = self.accelerator.gather if self.args.world_size > 1 else None
            logs.update(self._del_metrics.collect(gather, self.args.device))
        super().log(logs, start_time)

    # --- hooks ----------------------------------------------------------------------------------
    def reduce_counts(self, local: torch.Tensor) -> torch.Tensor:
        """[2] ``[tokens, digits]`` of this rank's window -> their sums over all processes, by the
        collective the Trainer sums ``num_items_in_batch`` with (``accelerator.gather``)."""
        if self.args.world_size <= 1:
            return local
        return self.accelerator.gather(local.unsqueeze(0)).sum(0)

    def loss_normalisers(self, window: WindowCounts, targets: torch.Tensor) -> WindowCounts:
        """The counts a training micro-batch's loss divides by: the window's global counts."""
        return window

    # --- internals ------------------------------------------------------------------------------
    def _refuse_unsupported_setup(self, loss_path: str, chunk_size: int, compact: bool) -> None:
        problems = argument_problems(self.args, self.compute_loss_func)
        problems += parallelism_problems(self.args.n_gpu, self.get_tp_size(), self.get_cp_size(), self.get_sp_size())
        problems += model_problems(getattr(self.model, "config", None))
        problems += loss_path_problems(loss_path, chunk_size)
        if not isinstance(compact, bool):
            problems.append(f"compact={compact!r}: pass True or False")
        raise_problems(problems)

    def _chunked_loss_host(self) -> Optional[ChunkedLossHost]:
        """Under ZeRO-3 a loss path that reads the LM-head weight (the chunked one) runs as a module
        of the model (:mod:`.zero3_head`), so that ZeRO-3 gathers that weight for it; attached
        before ``train()`` hands the model to DeepSpeed. None on the logits path and without ZeRO-3."""
        if not self.del_loss_path.reads_head_weight or not ds.parameters_partitioned():
            return None
        return attach_chunked_loss_host(self.model)

    def _forward(
        self, model: torch.nn.Module, inputs: Mapping[str, Any], targets: torch.Tensor, spans: Optional[NumberSpans]
    ):
        """(the model's outputs, the loss of this batch as a call taking the normalisers); ``spans``:
        the targets' number spans computed on the whole sequences, or None (computed here)."""
        unwrapped = self.accelerator.unwrap_model(model)
        run = TrainerModelRun(
            model,
            self._forward_inputs(inputs),
            targets,
            type(unwrapped).__name__,
            lambda: self._head_weight(unwrapped),
            lambda: unsharded_head(unwrapped, "compact=True"),
        )
        path = self.del_loss_path
        output = path.model_output(run)
        self.del_loss.set_sequence_shard(self._sequence_shard() if model.training else None)
        calls = LossCalls.of(self._loss_on(output.device))
        if self._del_host is None:
            score = functools.partial(
                path.score, calls, output, targets, head_weight=run.head_weight, spans=spans, head=run.head
            )
            return run.outputs, score
        if getattr(unwrapped, HOST_NAME, None) is not self._del_host:
            raise UnsupportedSetupError(
                f"loss_path={path.name!r} under ZeRO-3: the model in training is not the one DELTrainer attached its "
                "loss module to (a model_init?); pass the model itself"
            )
        host = functools.partial(self._del_host, output, targets, spans=spans, path=path, calls=calls)
        return run.outputs, lambda **counts: loss_output(host(**counts))

    def _resolve_auto_weight(self, batch_samples: list, window: WindowCounts) -> None:
        """lambda of ``loss_weight="auto"`` from the first step's micro-batches (the module doc); a
        collective, as :meth:`get_batch_samples` is."""
        unit_terms = functools.partial(self._unit_terms, window=window)
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        ratio = self.del_loss_spec.auto_ratio
        chosen = measure_auto_weight(self.model, batch_samples, unit_terms, self.reduce_counts, ratio, devices)
        self.del_loss.set_weight(chosen.weight)
        self.del_auto_weight, self._del_auto_pending = chosen, False
        self.log(
            {"auto_loss_weight": chosen.weight, "auto_weight_ce": chosen.ce, "auto_weight_unit_term": chosen.unit_term}
        )

    def _unit_terms(self, inputs: Mapping[str, Any], window: WindowCounts) -> torch.Tensor:
        """The [2] tensor (ce, aux) of one micro-batch with the step's window normalisers."""
        inputs = self._prepare_inputs(inputs)
        targets = aligned_targets(inputs)
        counts = self.loss_normalisers(window, targets)
        score = self._forward(self.model, inputs, targets, carried_spans(inputs))[1]
        out = score(num_tokens=counts.num_tokens, num_digits=counts.num_digits)
        return torch.stack([out.ce, out.aux])

    def _measure_step_totals(self, batch_samples: list, window: WindowCounts) -> None:
        """The whole-batch totals a loss with ``needs.step_totals`` scales by (NTIL), from one
        forward of the step's micro-batches without gradients (:func:`measure_step_totals`); a
        collective, as :meth:`get_batch_samples` is."""
        unit_terms = functools.partial(self._unit_terms, window=window)
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        measure_step_totals(self.del_loss, batch_samples, unit_terms, self.reduce_counts, devices)

    def _head_weight(self, model: torch.nn.Module) -> torch.Tensor:
        """The LM-head weight [V, H] the chunked loss scores against, read after the forward:
        whole under DDP, ZeRO-2 and FSDP2 as accelerate wraps it (the head's unit keeps its
        parameters unsharded from the forward to the backward); a sharded head is refused
        (:func:`.setup_checks.head_weight`)."""
        return head_weight(model)

    def _take_window(self) -> WindowCounts:
        if self._del_window is None or self._del_left <= 0:
            raise RuntimeError(
                "compute_loss ran in training mode outside the Trainer's training loop: the global token and "
                "digit counts of the step come from get_batch_samples, which was not called for this micro-batch"
            )
        self._del_left -= 1
        return self._del_window

    def _backward_scale(self) -> int:
        """R, the factor of each micro-batch loss before its backward (the module doc): the count
        of processes DDP / ZeRO / FSDP divide the summed gradients by; under DeepSpeed sequence
        parallelism the count DeepSpeed's averaging divides by for its ZeRO stage
        (:func:`del_core.engines.deepspeed.gradient_divisor`)."""
        processes = self.accelerator.num_processes
        if self._del_sp == 1:
            return processes
        ds_config = self.accelerator.state.deepspeed_plugin.deepspeed_config
        try:
            return ds.gradient_divisor(ds_config, processes // self._del_sp, self._del_sp)
        except ConfigError as error:
            raise UnsupportedSetupError(
                f"the del_core loss cannot train with sp_size={self._del_sp}: {error}"
            ) from error

    def _whole_sequence_spans(self, collate: Callable) -> WholeSequenceSpans:
        """The data collator under sequence parallelism (:mod:`.sequence_parallel`): batches padded
        to a multiple of ``sp_size`` (to the handler's ``sp_seq_length`` when the length is fixed),
        with position ids and the number spans of the whole sequences."""
        tokenizer = self.processing_class
        pad_id = getattr(tokenizer, "pad_token_id", None)
        if pad_id is None:
            pad_id = getattr(tokenizer, "eos_token_id", None) or 0
        handler = self.accelerator.parallelism_config.sp_handler
        fixed = None if handler.sp_seq_length_is_variable else handler.sp_seq_length
        return WholeSequenceSpans(collate, self.del_loss.vocab, self._del_sp, pad_id, fixed)

    def _forward_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        forward = {key: value for key, value in inputs.items() if key not in TARGET_KEYS}
        if self._del_no_cache:
            forward.setdefault("use_cache", False)
        return forward

    def _sequence_shard(self) -> Optional[SequenceShard]:
        """Under sequence parallelism the training batches are shards (DeepSpeed's
        ``UlyssesSPDataLoaderAdapter``): this rank's :class:`SequenceShard`, over DeepSpeed's
        Ulysses group (made when the model was prepared); None without sequence parallelism."""
        if self._del_sp == 1:
            return None
        if self._del_shard is None:
            group, rank, parts = ds.ulysses_group()
            self._del_shard = sequence_shard(rank, parts, group)
        return self._del_shard

    def _loss_on(self, device: torch.device) -> NumericLoss:
        if self._del_loss_device != device:
            self.del_loss.to(device)
            self._del_loss_device = device
        return self.del_loss


class DELTrainer(DELTrainerMixin, Trainer):
    """``transformers.Trainer`` training with a del_core loss (see :class:`DELTrainerMixin`)."""


def _bound_arguments(init: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of a call ``init(*args, **kwargs)`` by parameter name (``kwargs`` when they do
    not bind; the call itself then reports the error)."""
    try:
        return dict(inspect.signature(init).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return dict(kwargs)
