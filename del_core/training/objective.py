"""The module the engine trains (DeepSpeed, FSDP2 or DDP): a Hugging Face causal LM followed by a del_core loss.

The loss sits inside the engine's module so that everything it reads from the model (the LM-head
weight for the chunked path) is read during the module's own forward and backward, where the
engine can make it whole (ZeRO-3: the training entry point registers that weight as an external
parameter; FSDP2: the head's unit stays unsharded through the loss).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch

from del_core import LossOutput, NumberSpans, NumericLoss
from del_core.losses import CompactedPath, LossCalls, LossPath, build_loss_path

if TYPE_CHECKING:
    from del_core import DigitVocab
    from del_core.training.config import LossConfig

# The named scalars the objective returns per micro-batch: the differentiable loss parts and the
# loss's detached metrics over the micro-batch (see del_core.LossOutput).
LOSS_PARTS = ("loss", "ce", "aux")
LOSS_METRICS = ("n_tokens", "n_digits", "digit_entropy", "digit_acc")


def as_named_tensors(out: LossOutput) -> dict[str, torch.Tensor]:
    """The loss result as a flat dict of scalar tensors (keys LOSS_PARTS + LOSS_METRICS): ZeRO-3's
    module hooks see the tensors of a dict (not those inside a dataclass); a metric the loss does
    not compute (no digit vocabulary) is 0."""
    zero = torch.zeros((), device=out.loss.device)
    named = {"loss": out.loss, "ce": out.ce, "aux": out.aux}
    named.update({name: out.metrics.get(name, zero).float().to(out.loss.device) for name in LOSS_METRICS})
    return named


@dataclass(frozen=True)
class LossCompilation:
    """How the objective compiles its loss: the torch.compile ``backend`` and ``max_tokens``, the
    most tokens a micro-batch holds (micro-batch size x max length), which fixes the chunked
    path's chunk count so that every padded length runs the same graph."""

    backend: str = "inductor"
    max_tokens: int = 1


class CausalLMObjective(torch.nn.Module):
    """``forward(input_ids, targets, ...) -> dict`` of named scalars, see :func:`as_named_tensors`.

    input_ids, targets [B, T] int64 (targets aligned: position t predicts targets[t], -100 ignored);
    attention_mask [B, T] or None; position_ids [B, T] (restart at 0 for each packed example; with
    ``attention_mask=None`` transformers then keeps attention inside each example).
    loss_path (:data:`del_core.losses.LOSS_PATHS`) "logits": the model's logits [B, T, V] go to the
    loss; "chunked": the last hidden states and the LM-head weight go to ``loss.from_hidden``,
    ``chunk_size`` tokens at a time; ``path`` is that :class:`del_core.losses.LossPath`, which runs
    the model (through :class:`ObjectiveRun`) and scores its output.
    num_tokens, num_digits: the global normalisers (0-dim tensors); spans: the targets'
    :class:`del_core.NumberSpans`, computed once where the batch was made.
    compile_loss: a :class:`LossCompilation` to run the loss under ``torch.compile`` (dynamic
    shapes, full graph: a graph break is an error, not a silent slowdown), else None (eager).
    compact: the path on the scored positions alone (:class:`del_core.losses.CompactedPath`: the
    LM head and the loss see the rows whose target is not -100); scored: [M] int64, the flat
    indices of those positions in ``targets.reshape(-1)`` found on the host where the batch was
    made (``TokenBatch.with_scored``; only with ``compact``), else the path finds them on the
    device (one host sync per micro-batch).
    """

    def __init__(
        self,
        lm: torch.nn.Module,
        loss_fn: NumericLoss,
        loss_path: str = "logits",
        chunk_size: int = 256,
        compile_loss: Optional[LossCompilation] = None,
        compact: bool = False,
    ):
        super().__init__()
        self.lm = lm
        # Not a submodule: its (frozen) buffers are no model state to partition, save or export.
        self._loss_fn = (loss_fn,)
        self.chunk_size = chunk_size
        self.compilation = compile_loss
        self.path: LossPath = build_loss_path(loss_path, chunk_size, self._num_chunks(), "loss_path", compact)
        self._compiled = None  # the compiled LossCalls, built on first use
        self.vocab_slice = None  # set by use_vocab_parallel_head under tensor parallelism
        self.tp_group = None
        # DeepSpeed's AutoTP installs its own vocab-parallel cross-entropy here when it makes the
        # LM head vocab-parallel; it is never called (the del_core loss reduces the shards).
        self.loss_function = None
        self.path.check_model(lm)

    @property
    def loss_path(self) -> str:
        """The path's name, one of :data:`del_core.losses.LOSS_PATHS`."""
        return self.path.name

    @property
    def loss_fn(self) -> NumericLoss:
        return self._loss_fn[0]

    def set_loss_fn(self, loss_fn: NumericLoss) -> None:
        self._loss_fn = (loss_fn,)
        self._compiled = None

    def _loss_calls(self) -> LossCalls:
        """The loss's own calls, or their compiled forms."""
        if self.compilation is None:
            return LossCalls.of(self.loss_fn)
        if self._compiled is None:
            own = LossCalls.of(self.loss_fn)
            self._compiled = LossCalls(
                *(
                    torch.compile(call, backend=self.compilation.backend, dynamic=True, fullgraph=True)
                    for call in (own.logits, own.chunked)
                )
            )
        return self._compiled

    def _num_chunks(self) -> Optional[int]:
        """Under compile, a fixed chunk count sized for the longest micro-batch (one graph for
        every padded length); eagerly, None (``chunk_size`` tokens per chunk)."""
        if self.compilation is None:
            return None
        return max(1, -(-self.compilation.max_tokens // self.chunk_size))

    def use_vocab_parallel_head(self, vocab_slice, tp_group) -> None:
        """The LM head returns this rank's logit columns ``vocab_slice`` (a VocabSlice whose reducer
        all-reduces over ``tp_group``): the loss reduces partial sums instead of full logits."""
        self.vocab_slice = vocab_slice
        self.tp_group = tp_group

    def head_weight(self) -> torch.Tensor:
        return self.lm.get_output_embeddings().weight

    def forward(
        self,
        input_ids: torch.Tensor,
        targets: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        num_tokens: Optional[torch.Tensor] = None,
        num_digits: Optional[torch.Tensor] = None,
        spans: Optional[NumberSpans] = None,
        scored: Optional[torch.Tensor] = None,
    ) -> dict[str, torch.Tensor]:
        if scored is not None and not isinstance(self.path, CompactedPath):
            raise ValueError("scored positions are read by a compacted loss path only (compact=True)")
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
        run = ObjectiveRun(self, inputs)
        output = self.path.model_output(run)
        out = self.path.score(
            self._loss_calls(),
            output,
            targets,
            num_tokens,
            num_digits,
            head_weight=self.head_weight,
            vocab_slice=self.vocab_slice,
            spans=spans,
            head=run.head,
            positions=scored,
        )
        return as_named_tensors(out)


def build_objective(
    model: Any,
    loss: LossConfig,
    vocab: Optional[DigitVocab],
    head_weight: Callable[[], torch.Tensor],
    device: torch.device,
    max_tokens: int,
    log: Callable[[str], None],
) -> CausalLMObjective:
    """The objective of a run: ``model`` followed by the recipe's ``loss`` section built for
    ``vocab`` (``head_weight``: a copy of the LM-head weight, for the losses that read it), its
    constant buffers on ``device``, compiled when ``loss.compile`` for micro-batches of at most
    ``max_tokens`` tokens."""
    loss_fn = loss.build(vocab, head_weight)
    loss_fn.to(device)  # its constant buffers (SMMD's kernel): not a submodule of the engine's module
    compilation = None
    if loss.compile:
        compilation = LossCompilation(loss.compile_backend, max_tokens)
        log(f"[loss] torch.compile({loss.name}, backend={loss.compile_backend}, dynamic shapes)")
    if loss.compact:
        log(f"[loss] compacted: the LM head and the loss run on the scored positions alone ({loss.path} path)")
    return CausalLMObjective(model, loss_fn, loss.path, loss.chunk_size, compilation, loss.compact)


class ObjectiveRun:
    """The objective's :class:`del_core.losses.CausalLMRun`: its LM on one batch's ``inputs``."""

    def __init__(self, objective: CausalLMObjective, inputs: dict):
        self.objective, self.inputs = objective, inputs

    def logits(self) -> torch.Tensor:
        return self.objective.lm(**self.inputs).logits

    def hidden_states(self) -> torch.Tensor:
        """The model body's output [B, T, H] (the LM head is not run); under tensor parallelism
        entering the head's region, so that its gradient is summed over the group."""
        hidden = self.objective.lm.base_model(**self.inputs).last_hidden_state
        if self.objective.tp_group is not None:
            from del_core.parallel import copy_to_tensor_parallel_region

            hidden = copy_to_tensor_parallel_region(hidden, self.objective.tp_group)
        return hidden

    def head_weight(self) -> torch.Tensor:
        return self.objective.head_weight()

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        """The LM-head module on ``rows`` [M, H]: [M, V] (its engine hooks run)."""
        return self.objective.lm.get_output_embeddings()(rows)
