"""The training recipe as a class that conducts a run: its typed attributes are the architecture of
a run, its collaborators (the output folder, the model's and the engine's set-up, the held-out
evaluations, the reporter, the export) do the work.

    trainer = Trainer(load_train_config("recipes/configs/tiny.yaml"))
    trainer.setup()          # process group, tokenizer + vocabulary, data, model + loss, engine, resume + logging
    final = trainer.train()  # train_step(), maybe_evaluate(), maybe_checkpoint() per optimizer step, then finish()
    trainer.cleanup()

Per optimizer step each data-parallel rank runs its accumulation micro-batches; every micro-batch
loss is divided by the token and digit counts of the whole global batch (summed over micro-batches
and data-parallel ranks first), so the update does not depend on how the global batch is split.
The engine (``parallel.engine``: DeepSpeed, FSDP2 or DDP) is a :class:`del_core.engines.Backend`
that owns its part of the run from the process group to the exported weights; the trainer never
asks which engine it holds.
Under sequence parallelism (``parallel.sp``, DeepSpeed Ulysses) the ranks of a group share their
micro-batches and each trains its contiguous shard of the sequences
(:func:`del_core.data.sequence_shards.shard_batch`): the number spans and the counts come from the
whole sequences, so a number cut by a shard boundary keeps its place values.
The loop reads the device once per optimizer step: the step's record and the stop decision come
from one read after the step (:func:`del_core.training.step_metrics.read_step`); batches move from
page-locked memory without blocking the host.
The batches of step s are a function of (seed, s) alone (:class:`StepPlan`), so a resumed run
replays exactly the batches of an uninterrupted one.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

import torch

from del_core import DigitVocab, NumberSpans
from del_core.config import ConfigError
from del_core.data.dataset_cache import DataRequest, prepare_cached_training_data
from del_core.data.sequence_shards import shard_batch
from del_core.data.splits import TrainingData
from del_core.data.tokenized import TokenBatch, check_target_ids, collate
from del_core.engines import Backend, BatchShape, Engine, EngineSettings, Runtime, backend_type
from del_core.engines.runtime import layout_line, rng_devices
from del_core.losses import AutoWeight, head_weight_copy, measure_auto_weight
from del_core.losses.step_totals import measure_step_totals
from del_core.models.sequence_attention import evaluation_attention
from del_core.parallel import ParallelDims, local_main_first, sequence_shard, sum_over
from del_core.training.config import TrainConfig
from del_core.training.heldout import HeldOutHistory, HeldOutResult
from del_core.training.loss_weight import run_auto_weight
from del_core.training.model_export import ExportSource, export_model
from del_core.training.model_setup import RunTokenizer, load_run_tokenizer, load_training_model, output_vocab_size
from del_core.training.objective import CausalLMObjective, build_objective
from del_core.training.records import FinalRecord, TrainRecord
from del_core.training.reporting import Reporter, SilentReporter
from del_core.training.run_folder import RunFolder, StopRequest
from del_core.training.schedule import StepPlan, apply_optimizer_settings, lr_scheduler
from del_core.training.step_metrics import StepSums, read_step, step_counts, train_record


def training_data(config: TrainConfig, tokenizer: Any, log: Callable[[str], None], ordered: Any = None) -> TrainingData:
    """The training items and held-out set that ``config`` names, tokenised with ``tokenizer`` once
    into the data cache and memory-mapped (:mod:`del_core.data.dataset_cache`); ``ordered`` is the
    trainer's :func:`local_main_first`, so local rank 0 builds a missing cache entry first."""
    data = config.data
    request = DataRequest(
        data.source,
        data.split,
        data.eval_source,
        data.eval_size,
        data.max_length,
        data.packing,
        config.run.seed,
        data.prompt_format,
    )
    return prepare_cached_training_data(request, tokenizer, log, data.cache_dir, data.num_proc, ordered)


class Trainer:
    """Fine-tunes a causal LM with a del_core loss under DeepSpeed, FSDP2 or DDP (see the module
    docstring).

    The trainer conducts; its collaborators do the work: :class:`RunFolder` keeps the output
    folder (lock, identity, status, records, checkpoints), :mod:`.model_setup` loads the tokenizer
    and the model, the engine's :class:`Backend` sets up the process group and builds the engine,
    :class:`HeldOutHistory` evaluates, the reporter logs and :mod:`.model_export` writes the final
    model.
    """

    config: TrainConfig
    output_dir: Path
    runtime: Runtime
    dims: ParallelDims
    backend: Backend  # the engine's life in the run (parallel.engine)
    folder: Optional[RunFolder]  # OUTPUT_DIR's bookkeeping, from the process set-up on
    stop: StopRequest
    tokens: RunTokenizer  # the tokenizer, its pad id and number vocabulary; where model and tokenizer come from
    vocab: Optional[DigitVocab]  # tokens.vocab: what the loss and the batches' number spans read
    data: TrainingData
    plan: StepPlan
    total_steps: int
    objective: CausalLMObjective
    peft_model: Any  # the PEFT wrapper of objective.lm with lora.enabled (writes the adapter), else None
    output_vocab_size: int  # logit columns of the model: a target id must be below it
    engine: Engine  # what the backend built: driven per micro-batch
    scheduler: Any
    reporter: Union[Reporter, SilentReporter]
    heldout: HeldOutHistory
    step: int
    last: Optional[TrainRecord]
    stop_agreed: bool  # the ranks' agreed answer, read with the last step's metrics: was a stop requested?

    def __init__(self, config: TrainConfig):
        self.config = config
        self.output_dir = Path(config.run.output_dir)
        self.folder = None
        self.reporter = SilentReporter()
        self.last = None
        self.step = 0
        self.stop_agreed = False
        self.backend = backend_type(config.parallel.engine)(engine_settings(config))

    # --- setup ---------------------------------------------------------------------------------
    def setup(self) -> None:
        self._setup_process()
        self._setup_tokenizer()
        self._setup_data()
        self._check_resume()
        self._setup_model_and_loss()
        self._setup_engine()
        self._setup_resume_and_logging()

    def log(self, text: str) -> None:
        """A console line from rank 0 (through the progress bar once it exists)."""
        if not self.dims.is_main:
            return
        if isinstance(self.reporter, Reporter):
            self.reporter.write(text)
        else:
            print(text, flush=True)

    def _setup_process(self) -> None:
        """The engine's process group, where this rank computes, OUTPUT_DIR claimed (rank 0 locks it
        before anything is written into it), the stop signals and the engine's layout."""
        config = self.config
        self.backend.init_process(torch.cuda.is_available())
        self.runtime = Runtime.detect(config.model.precision)  # after init: each rank's CUDA device is set
        self.dims = ParallelDims.from_world(config.parallel.tp, config.parallel.sp)
        self.folder = RunFolder(self.output_dir, self.dims, self.log)
        self.folder.claim(config.run.resume, config.run.overwrite)
        self.stop = StopRequest(announce=self.dims.is_main)
        shape = BatchShape(config.run.global_batch_size, config.run.micro_batch_size, self.dims.dp)
        self.backend.configure(self.dims, self.runtime, shape)
        self.log(layout_line(self.dims, self.runtime, shape.accumulation, shape.micro_batch, self.backend.describe()))

    def _setup_tokenizer(self) -> None:
        self.tokens = load_run_tokenizer(self.config, local_main_first(self.dims.local_rank), self.log)
        self.vocab = self.tokens.vocab

    def _setup_data(self) -> None:
        data, run = self.config.data, self.config.run
        self.data = training_data(self.config, self.tokens.tokenizer, self.log, local_main_first(self.dims.local_rank))
        try:
            self.plan = StepPlan(
                len(self.data.items), run.global_batch_size, run.micro_batch_size, self.dims.dp, run.seed
            )
        except ValueError as err:
            raise ConfigError(f"data {data.source}: {err}") from None
        self.total_steps = self.plan.total_steps(run.epochs, run.max_steps)
        self.log(
            f"[plan] {len(self.data.items)} sequences, {self.plan.steps_per_epoch} steps per epoch, "
            f"{self.total_steps} steps" + (", padding-free micro-batches (one row each)" if data.padding_free else "")
        )

    def _check_resume(self) -> None:
        """The verified checkpoint to resume (if any), checked against the run's identity: before
        the model is loaded, a resume that would compute differently is refused."""
        self.folder.find_resume(self.config, len(self.data.items), self.total_steps, self.runtime.device)

    def _setup_model_and_loss(self) -> None:
        built = load_training_model(self.config, self.tokens.model_source, self.backend, self.log)
        model, self.peft_model, self.dims = built.model, built.peft_model, built.dims
        self.output_vocab_size = output_vocab_size(model)
        head_weight = functools.partial(head_weight_copy, model, self.runtime.device, self.backend.head_gather())
        max_tokens = self.config.run.micro_batch_size * self.config.data.max_length
        self.objective = build_objective(
            model, self.config.loss, self.vocab, head_weight, self.runtime.device, max_tokens, self.log
        )
        # from_pretrained returns the model in eval mode: without this, dropout and gradient
        # checkpointing (transformers checkpoints only in training mode) would stay off until the
        # first held-out evaluation restored train mode, and for the whole run without one.
        self.objective.train()
        self.backend.attach_objective(self.objective)

    def _setup_engine(self) -> None:
        opt = self.config.optimizer
        make_scheduler = functools.partial(
            lr_scheduler, total_steps=self.total_steps, warmup_ratio=opt.warmup_ratio, min_ratio=opt.min_lr_ratio
        )
        built = self.backend.build(self.objective, make_scheduler, self.log)
        self.engine, self.scheduler, self.dims = built.engine, built.scheduler, built.dims

    def _setup_resume_and_logging(self) -> None:
        """The checkpoint loaded (with the optimizer settings a resume overrides), the automatic
        lambda, the run's records begun and the held-out evaluator."""
        self.step = self.folder.restore(self.engine, self.config.lora.enabled)
        if self.folder.changed_at(self.step):
            apply_optimizer_settings(self.scheduler, self.config.optimizer, self.total_steps)
        if self.config.loss.is_auto:
            self._resolve_auto_weight()
        self.reporter = self.folder.begin(self.step, self.config, self.total_steps, self.stop)
        synced_generation = self.backend.synced_generation(self.dims.world)
        self.heldout = HeldOutHistory.for_run(
            self.config, self.data, self.tokens, self.dims, self.runtime.device, synced_generation, self.log
        )
        self.stop.step = self.step

    # --- training ------------------------------------------------------------------------------
    def _evaluate(self, label: str) -> Optional[HeldOutResult]:
        with self.backend.evaluating():
            return self.heldout.evaluate(self.objective, self.step, label, self.reporter)

    def maybe_evaluate(self) -> None:
        """The held-out teacher-forced metrics every ``run.eval_every`` steps, label "during" (not
        at the last step, whose "after" evaluation is the same measurement plus generation).
        Collective. Training does not see it: :meth:`HeldOutEvaluator.evaluate` runs in eval mode,
        restores train mode and forks the RNG, and the batches of a step depend on (seed, step) only."""
        every = self.config.run.eval_every
        if every and self.step % every == 0 and self.step < self.total_steps:
            self._evaluate("during")

    def train(self) -> Optional[FinalRecord]:
        """Train to ``total_steps``; the final record, or None when a signal stopped the run."""
        if self.step == 0:
            self._evaluate("before")
        started = time.time()
        while self.step < self.total_steps:
            self._maybe_fail()
            self.last = self.train_step()
            self.maybe_evaluate()
            if self.maybe_checkpoint():
                return None
        return self.finish(time.time() - started)

    def _maybe_fail(self) -> None:
        """The testing aid ``run.fail_at_step``: die like a crashed node, with no clean-up."""
        if self.config.run.fail_at_step and self.step + 1 == self.config.run.fail_at_step:
            self.log(f"[fail_at_step] exiting abruptly at the start of step {self.step + 1}")
            os._exit(17)

    def _micro_batches(self) -> list[TokenBatch]:
        """This rank's micro-batches of the next step, with their number spans and checked target
        ids (:func:`check_target_ids`), still on the CPU."""
        items = self.data.items
        batches = [
            collate([items[i] for i in micro], self.tokens.pad_id, self.config.data.padding_free).with_spans(self.vocab)
            for micro in self.plan.micro_batches(self.step, self.dims.dp_rank)
        ]
        check_target_ids(batches, self.output_vocab_size)
        return batches

    def _rank_part(self, cpu_batch: TokenBatch, whole: bool = False) -> TokenBatch:
        """What this rank's objective scores of a micro-batch, still on the CPU: under sequence
        parallelism its shard (its spans cut from the whole batch's), unless ``whole`` (evaluation
        attention, every rank the whole batch); under ``loss.compact`` with the scored positions
        of that part, found here on the host (the compacted path then costs no device sync)."""
        batch = cpu_batch if whole else shard_batch(cpu_batch, self.dims.sp_rank, self.dims.sp, self.tokens.pad_id)
        return batch.with_scored() if self.config.loss.compact else batch

    def _forward(
        self, batch: TokenBatch, counts: tuple[torch.Tensor, torch.Tensor], whole: bool = False
    ) -> dict[str, torch.Tensor]:
        """The objective through the engine on this rank's part of one micro-batch
        (:meth:`_rank_part`, on the device), with the global counts; under sequence parallelism
        told its shard, unless ``whole``."""
        self.objective.loss_fn.set_sequence_shard(
            None if whole else sequence_shard(self.dims.sp_rank, self.dims.sp, self.dims.sp_group)
        )
        return self.engine(
            input_ids=batch.input_ids,
            targets=batch.targets,
            attention_mask=None if self.config.data.joins_examples else batch.attention_mask,
            position_ids=batch.position_ids,
            num_tokens=counts[0],
            num_digits=counts[1],
            spans=self._spans_input(batch),
            scored=batch.scored,
        )

    def _resolve_auto_weight(self) -> None:
        """loss.weight=auto: lambda from the first batch at step 0 (saved), from OUTPUT_DIR on resume."""
        chosen = run_auto_weight(self._measure_auto_weight, self.output_dir, self.step, self.dims.is_main)
        self.objective.loss_fn.set_weight(chosen.weight)
        self.log(chosen.describe(self.config.loss.name))

    def _measure_auto_weight(self) -> AutoWeight:
        """lambda from the CE and the weight-1 digit term of step 1's global batch at the initial
        weights (:func:`measure_auto_weight`); under sequence parallelism every rank runs whole
        sequences with evaluation attention. Collective."""
        batches = self._micro_batches()
        counts = step_counts(batches, self.runtime.device, self.dims.dp_group)
        sequence_parallel = self.dims.sp > 1
        unit_terms = functools.partial(self._unit_terms, counts=counts, whole=sequence_parallel)
        with evaluation_attention(self.objective.lm, enabled=sequence_parallel):
            return measure_auto_weight(
                self.objective,
                batches,
                unit_terms,
                functools.partial(sum_over, group=self.dims.dp_group),
                self.config.loss.auto_ratio,
                rng_devices(self.runtime.device),
                dtype=torch.float32,
            )

    def _measure_step_totals(self, batches: list[TokenBatch], counts: torch.Tensor) -> None:
        """The whole-batch totals a loss with ``needs.step_totals`` scales by (NTIL): one forward
        of the step's micro-batches without gradients, before the step (:func:`measure_step_totals`).
        Collective."""
        unit_terms = functools.partial(self._unit_terms, counts=counts)
        # The ranks' sums add up over the data-parallel ranks and, under sequence parallelism, their shards.
        sum_ranks = functools.partial(sum_over, group=self.dims.shard_sum_group)
        measure_step_totals(self.objective.loss_fn, batches, unit_terms, sum_ranks, rng_devices(self.runtime.device))

    def _unit_terms(
        self, cpu_batch: TokenBatch, counts: tuple[torch.Tensor, torch.Tensor], whole: bool = False
    ) -> torch.Tensor:
        """The [2] tensor (ce, aux) of one micro-batch with the step's global normalisers."""
        out = self._forward(self._rank_part(cpu_batch, whole).to(self.runtime.device), counts, whole=whole)
        return torch.stack([out["ce"], out["aux"]])

    def train_step(self) -> TrainRecord:
        """One optimizer step over the global batch; its record is logged and returned.

        The loop reads the device once, after the step (:func:`read_step`): the metrics, the
        counts, the grad norm, the peak memory and the stop flag (:attr:`stop_agreed`) together.
        """
        started = time.time()
        batches = self._micro_batches()
        # The global normalisers: counted on the host copies, summed over data parallel on the
        # device, read with the metrics at the end.
        counts = step_counts(batches, self.runtime.device, self.dims.dp_group)
        lr = self.scheduler.get_last_lr()[0] if self.scheduler is not None else self.config.optimizer.lr
        sums = StepSums(self.runtime.device)
        loss_fn = self.objective.loss_fn
        loss_fn.set_step(self.step)
        if loss_fn.needs.step_totals:
            self._measure_step_totals(batches, counts)
        for cpu_batch in batches:
            batch = self._rank_part(cpu_batch).to(self.runtime.device)  # non-blocking from pinned memory on a GPU
            out = self._forward(batch, counts)
            # Each micro-batch loss is already divided by the global counts: the gradient wanted is
            # the plain sum over micro-batches and ranks, which the engine averages over.
            self.engine.backward(out["loss"] * self.backend.gradient_divisor, scale_wrt_gas=False)
            self.engine.step()
            sums.add(out)
        loss_fn.set_step_totals(None)
        self.step += 1
        self.stop.step = self.step
        readout = read_step(
            sums,
            counts,
            self.engine.get_global_grad_norm(),
            self.runtime.peak_memory_gb(),
            self.stop.requested,
            self.dims.shard_sum_group,
        )
        self.stop_agreed = readout.stop_requested
        record = train_record(self.step, readout, lr, time.time() - started)
        if not math.isfinite(record.loss):
            raise FloatingPointError(
                f"step {self.step}: the loss is {record.loss}; stopping before the weights are saved"
            )
        log_every = self.config.run.log_every
        self.reporter.log(record, console=self.step % log_every == 0 or self.step == self.total_steps)
        self.reporter.advance(record)
        return record

    def _spans_input(self, batch: TokenBatch) -> Optional[NumberSpans]:
        """The batch's spans for the loss; None under tensor parallelism, where DeepSpeed's check
        that the ranks of a group got the same inputs cannot compare a tuple of tensors (the loss
        then finds the spans again on the device)."""
        return batch.spans if self.dims.tp == 1 else None

    def maybe_checkpoint(self) -> bool:
        """Checkpoint every ``run.save_every`` steps, and when a stop signal arrived on any rank by
        the last step's read (:attr:`stop_agreed`: every rank decides alike without another
        collective; then mark the run stopped and return True: the caller returns without finishing)."""
        run = self.config.run
        stop_now = self.stop_agreed and self.step < self.total_steps
        if (run.save_every and self.step % run.save_every == 0) or stop_now:
            self.save_checkpoint()
        if stop_now:
            self.folder.mark_stopped(self.step)
        return stop_now

    def save_checkpoint(self) -> Path:
        run = self.config.run
        return self.folder.save_checkpoint(self.engine, self.step, run.save_total_limit, self.config.lora.enabled)

    # --- the end -------------------------------------------------------------------------------
    def finish(self, train_time_s: float) -> FinalRecord:
        """The last checkpoint, the held-out evaluation, the export and the final record."""
        run = self.config.run
        if run.save_every and self.step % run.save_every:
            self.save_checkpoint()
        after, before = self._evaluate("after"), self.heldout.before
        if run.export:
            self.export()
        final = FinalRecord(self.step, train_time_s, self.last, before and before.record, after and after.record)
        self.reporter.log(final, console=False)
        if self.dims.is_main:
            self.heldout.print_summary(self.log)
            self.folder.finish(self.step, self.heldout.answer_records())
        return final

    def export(self) -> None:
        """Gather the full weights once and write OUTPUT_DIR/final in Hugging Face format; with
        LoRA the adapters merged into the base weights there, and the adapter in final/adapter."""
        source = ExportSource(
            self.backend.full_state, self.objective, self.peft_model, self.tokens.tokenizer, self.config
        )
        export_model(source, self.folder.final_model, self.dims, self.log)

    def mark_failed(self) -> None:
        """An exception ends the run: rank 0's status says so (never left "running")."""
        if self.folder is not None:
            self.folder.mark_failed(self.step)

    def cleanup(self) -> None:
        """Close the reporters' files and release OUTPUT_DIR's lock (the process group is torn
        down by the entry point)."""
        self.reporter.close()
        if self.folder is not None:
            self.folder.close()


def engine_settings(config: TrainConfig) -> EngineSettings:
    """What the engine reads of ``config``."""
    return EngineSettings(config.parallel, config.optimizer, config.lora.enabled)


def run(config: TrainConfig) -> Optional[FinalRecord]:
    """Set up, train and clean up; the final record (None when SIGTERM/SIGUSR1 stopped the run).
    A run stopped by Ctrl-C (after its checkpoint) raises SystemExit(130)."""
    trainer = Trainer(config)
    try:
        trainer.setup()
        final = trainer.train()
    except BaseException:
        trainer.mark_failed()
        raise
    finally:
        trainer.cleanup()
    if final is None and trainer.stop.exit_code:
        raise SystemExit(trainer.stop.exit_code)
    return final
