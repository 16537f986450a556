"""The training recipe as a class: its typed attributes are the architecture of a run.

    trainer = Trainer(load_train_config("recipes/configs/tiny.yaml"))
    trainer.setup()          # process group, tokenizer + vocabulary, data, model + loss, engine, resume + logging
    final = trainer.train()  # train_step() per optimizer step, maybe_checkpoint() after each, then finish()
    trainer.cleanup()

Per optimizer step each data-parallel rank runs its accumulation micro-batches; every micro-batch
loss is divided by the token and digit counts of the whole global batch (summed over micro-batches
and data-parallel ranks first), so the update does not depend on how the global batch is split.
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

import dataclasses
import functools
import math
import os
import resource
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import torch

from del_core import DigitVocab, MultiDigitVocabularyError, NumberSpans
from del_core.config import ConfigError, config_to_dict, config_to_yaml
from del_core.data.dataset_cache import DataRequest, prepare_cached_training_data
from del_core.data.jsonl import write_jsonl
from del_core.data.prompting import PromptFormat
from del_core.data.sequence_shards import shard_batch
from del_core.data.splits import TrainingData
from del_core.data.tokenized import TokenBatch, check_target_ids, collate
from del_core.engines import deepspeed as ds
from del_core.losses import AutoWeight, head_weight_copy, loss_needs, measure_auto_weight
from del_core.models import (
    LoraSettings,
    LoraTargetError,
    attention_implementation,
    check_targets,
    drop_tied_copies,
    hf_model,
    load_model,
    merged_state_dict,
    parameter_counts,
    resolve_model,
    resolve_tokenizer,
    save_adapter,
    save_hf,
    wrap_with_lora,
)
from del_core.models.sequence_attention import evaluation_attention
from del_core.parallel import (
    ParallelDims,
    barrier,
    check_head_counts,
    check_sequence_head_counts,
    local_main_first,
    max_over,
    sum_over,
)
from del_core.tokenizers import CACHE_ROOT, load_tokenizer
from del_core.training import checkpoints, run_lock
from del_core.training.config import TrainConfig
from del_core.training.deepspeed_config import accumulation_steps, build_ds_config
from del_core.training.heldout import HeldOutEvaluator, HeldOutResult
from del_core.training.loss_weight import run_auto_weight
from del_core.training.objective import CausalLMObjective, LossCompilation
from del_core.training.optimizer import initialize_engine
from del_core.training.records import EvalRecord, FinalRecord, ResumeRecord, TrainRecord, cut_back
from del_core.training.reporting import Reporter, SilentReporter
from del_core.training.run_identity import Override, compare, run_identity, saved_identity
from del_core.training.run_status import StopRequest, write_status
from del_core.training.schedule import StepPlan, warmup_cosine
from del_core.training.step_metrics import StepSums, read_step, step_counts, train_record
from del_core.training.summary import HELDOUT_ANSWERS, answer_records, print_summary


@dataclass(frozen=True)
class Runtime:
    """Where and in what precision the run computes, decided once from the config and the machine."""

    on_gpu: bool
    device: torch.device
    dtype: torch.dtype  # bf16 on GPU (precision auto), fp32 on CPU
    use_ds_optimizer: bool  # DeepSpeed's AdamW (GPU default) or torch AdamW (CPU default)

    @classmethod
    def detect(cls, config: TrainConfig) -> Runtime:
        on_gpu = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        bf16 = config.model.precision == "bf16" or (config.model.precision == "auto" and on_gpu)
        use_ds = config.optimizer.name == "deepspeed" or (config.optimizer.name == "auto" and on_gpu)
        return cls(on_gpu, device, torch.bfloat16 if bf16 else torch.float32, use_ds)

    @property
    def bf16(self) -> bool:
        return self.dtype == torch.bfloat16

    def peak_memory_gb(self) -> float:
        if self.on_gpu:
            return torch.cuda.max_memory_allocated() / 1e9
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def output_vocab_size(model: Any) -> int:
    """The logit columns of a causal LM: its LM head's ``out_features`` (the module's full size,
    also while ZeRO-3 partitions the weight), else the text config's ``vocab_size``."""
    size = getattr(model.get_output_embeddings(), "out_features", None)
    return int(size if size is not None else model.config.get_text_config().vocab_size)


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
    """Fine-tunes a causal LM with a del_core loss under DeepSpeed (see the module docstring)."""

    config: TrainConfig
    output_dir: Path
    runtime: Runtime
    dims: ParallelDims
    ds_config: dict
    tokenizer: Any
    pad_id: int
    vocab: Optional[DigitVocab]
    data: TrainingData
    plan: StepPlan
    total_steps: int
    objective: CausalLMObjective
    peft_model: Any  # the PEFT wrapper of objective.lm with lora.enabled (writes the adapter), else None
    output_vocab_size: int  # logit columns of the model: a target id must be below it
    engine: Any
    scheduler: Any
    identity: dict[str, Any]  # what a checkpoint must share with the run resuming it (run_identity)
    overrides: list[Override]  # identity keys changed on purpose by resumes of this run, oldest first
    lock: Optional[run_lock.RunLock]  # rank 0's lock on OUTPUT_DIR
    reporter: Union[Reporter, SilentReporter]
    heldout: HeldOutEvaluator
    stop: StopRequest
    step: int
    before: Optional[HeldOutResult]
    after: Optional[HeldOutResult]
    during: list[EvalRecord]  # the run.eval_every evaluations of this process
    last: Optional[TrainRecord]
    stop_agreed: bool  # the ranks' agreed answer, read with the last step's metrics: was a stop requested?

    def __init__(self, config: TrainConfig):
        self.config = config
        self.output_dir = Path(config.run.output_dir)
        self.reporter = SilentReporter()
        self.before = self.after = self.last = None
        self.during = []
        self.peft_model = None
        self.step = 0
        self.stop_agreed = False
        self._model_source = ""
        self._tokenizer_source = ""
        self._partitioning = None  # transformers' HfDeepSpeedConfig, alive while the model is built
        self._sequence_groups = None  # DeepSpeed's Ulysses groups (mpu) with parallel.sp > 1
        self._resume: Optional[checkpoints.Resumable] = None
        self.overrides = []
        self.lock = None
        self._status_written = False

    # --- setup ---------------------------------------------------------------------------------
    def setup(self) -> None:
        self._setup_distributed()
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

    def _setup_distributed(self) -> None:
        ds.init_distributed(torch.cuda.is_available())
        self.runtime = Runtime.detect(self.config)  # after init: each rank's CUDA device is set
        self.dims = ParallelDims.from_world(self.config.parallel.tp, self.config.parallel.sp)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.dims.is_main:  # before anything is written into OUTPUT_DIR
            self.lock = run_lock.acquire(self.output_dir, self.log)
            run_lock.claim_folder(self.output_dir, self.config.run.resume, self.config.run.overwrite, self.log)
        self.stop = StopRequest(announce=self.dims.is_main)
        self.ds_config = build_ds_config(self.config, self.dims.dp, self.runtime.bf16, self.runtime.use_ds_optimizer)
        zero = self.ds_config["zero_optimization"]
        self._gradient_divisor = ds.gradient_divisor(self.ds_config, self.dims.dp, self.dims.sp)
        self.log(
            f"[run] {self.dims.world} rank(s) on {'GPU' if self.runtime.on_gpu else 'CPU'} = {self._model_parallel()} "
            f"x data parallel {self.dims.dp}, ZeRO-{zero.get('stage')}"
            f"{' + offload' if 'offload_optimizer' in zero else ''}, {'bf16' if self.runtime.bf16 else 'fp32'}; "
            f"global batch {self.config.run.global_batch_size} = micro {self.config.run.micro_batch_size} x "
            f"accumulation {accumulation_steps(self.config, self.dims.dp)} x {self.dims.dp} data-parallel rank(s)"
        )

    def _model_parallel(self) -> str:
        """How the ranks of one data-parallel rank share its work, for the [run] line."""
        if self.dims.sp > 1:
            return f"sequence parallel {self.dims.sp} (Ulysses: each rank 1/{self.dims.sp} of every sequence)"
        return f"tensor parallel {self.dims.tp}"

    def _setup_tokenizer(self) -> None:
        model = self.config.model
        cache = Path(model.cache_dir) if model.cache_dir else CACHE_ROOT
        with local_main_first(self.dims.local_rank):
            self._model_source = resolve_model(model.name, cache)
            self._tokenizer_source = (
                resolve_tokenizer(model.tokenizer, cache) if model.tokenizer else self._model_source
            )
            self.tokenizer = load_tokenizer(self._tokenizer_source, cache / "tokenizers")
        if self.tokenizer.eos_token_id is None:
            raise ConfigError(f"tokenizer {self._tokenizer_source} has no EOS token")
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        try:
            self.vocab = DigitVocab.from_tokenizer(self.tokenizer, name=str(self._tokenizer_source))
            self.log(f"[vocab] {self.vocab.describe()}")
        except MultiDigitVocabularyError as err:
            if loss_needs(self.config.loss.name).vocab:
                raise ConfigError(f"loss {self.config.loss.name} cannot score this tokenizer: {err}") from None
            self.vocab = None
            self.log(f"[vocab] no number vocabulary ({err}); loss {self.config.loss.name} runs without digit metrics")

    def _setup_data(self) -> None:
        data, run = self.config.data, self.config.run
        self.data = training_data(self.config, self.tokenizer, self.log, local_main_first(self.dims.local_rank))
        try:
            self.plan = StepPlan(
                len(self.data.items), run.global_batch_size, run.micro_batch_size, self.dims.dp, run.seed
            )
        except ValueError as err:
            raise ConfigError(f"data {data.source}: {err}") from None
        self.total_steps = self.plan.total_steps(run.epochs, run.max_steps)
        self.log(
            f"[plan] {len(self.data.items)} sequences, {self.plan.steps_per_epoch} steps per epoch, "
            f"{self.total_steps} steps"
        )

    def _check_resume(self) -> None:
        """The run's identity, and the verified checkpoint to resume (if any) checked against it:
        before the model is loaded, a resume that would compute differently is refused."""
        cfg = self.config
        self.identity = run_identity(cfg, len(self.data.items), self.total_steps, self.dims.world)
        self._resume = checkpoints.choose(
            cfg.run.resume, self.output_dir, self.log, (self.dims.rank, self.dims.world), self._all_intact
        )
        if self._resume is None:
            return
        saved = self._resume.state
        self.overrides = [Override(**o) for o in saved.get("overrides", [])]
        changed = compare(
            str(self._resume.path),
            saved_identity(saved),
            self.identity,
            list(cfg.run.resume_override),
            self._resume.step,
        )
        self.overrides += changed
        for o in changed:
            self.log(f"[resume] run.resume_override: {o.key} {o.saved!r} -> {o.now!r} from step {o.step + 1}")

    def _all_intact(self, intact: bool) -> bool:
        """Whether every rank found its share of a checkpoint intact (collective)."""
        damaged = torch.tensor([0.0 if intact else 1.0], device=self.runtime.device)
        return max_over(damaged).item() == 0.0

    def _setup_model_and_loss(self) -> None:
        model_cfg, loss_cfg = self.config.model, self.config.loss
        torch.manual_seed(self.config.run.seed)
        self._partitioning = ds.partitioning_context(self.ds_config, self.dims.tp)
        attn = attention_implementation(model_cfg.attn_implementation, self.runtime.on_gpu)
        model = load_model(self._model_source, self.runtime.dtype, attn, model_cfg.gradient_checkpointing)
        self.log(
            f"[model] {self._model_source}: {type(model).__name__}, attention {attn}, gradient checkpointing "
            f"{'on' if model_cfg.gradient_checkpointing else 'off'}"
        )
        if self.config.lora.enabled:
            model = self._wrap_with_lora(model)
        if self.dims.tp > 1:
            check_head_counts(model.config, self.dims.tp)
        if self.dims.sp > 1:
            self._register_sequence_parallel(model, attn)
        self.output_vocab_size = output_vocab_size(model)
        gathered = functools.partial(ds.gathered, enabled=self._zero3)
        loss_fn = loss_cfg.build(self.vocab, functools.partial(head_weight_copy, model, self.runtime.device, gathered))
        compilation = None
        if loss_cfg.compile:
            max_tokens = self.config.run.micro_batch_size * self.config.data.max_length
            compilation = LossCompilation(loss_cfg.compile_backend, max_tokens)
            self.log(f"[loss] torch.compile({loss_cfg.name}, backend={loss_cfg.compile_backend}, dynamic shapes)")
        self.objective = CausalLMObjective(model, loss_fn, loss_cfg.path, loss_cfg.chunk_size, compilation)
        # from_pretrained returns the model in eval mode: without this, dropout and gradient
        # checkpointing (transformers checkpoints only in training mode) would stay off until the
        # first held-out evaluation restored train mode, and for the whole run without one.
        self.objective.train()
        if self._zero3 and loss_cfg.path == "chunked" and self.dims.tp == 1:
            ds.register_lm_head_weight(self.objective)

    def _register_sequence_parallel(self, model: Any, attn: str) -> None:
        """DeepSpeed's Ulysses around the model's attention (before the engine is built with its groups)."""
        check_sequence_head_counts(model.config, self.dims.sp)
        micro = self.config.run.micro_batch_size
        self._sequence_groups = ds.register_sequence_parallel(model, attn, self.dims.sp, micro)
        self.dims = ds.sequence_parallel_dims(self.dims, self._sequence_groups)
        self.log(
            f"[sp] Ulysses over {self.dims.sp} ranks: number spans and counts from whole sequences, each rank "
            f"trains positions [r*T/{self.dims.sp}, (r+1)*T/{self.dims.sp}) (T padded to a multiple of {self.dims.sp})"
        )

    def _wrap_with_lora(self, model: Any) -> Any:
        """The model with LoRA adapters (PEFT) on ``lora.target_modules``, base weights frozen;
        returns the Hugging Face model inside the wrapper (kept in :attr:`peft_model`)."""
        settings = self._lora_settings()
        try:
            wrapped = check_targets(model, settings.target_modules)
        except LoraTargetError as err:
            raise ConfigError(str(err)) from None
        self.peft_model = wrap_with_lora(
            model, settings, self.config.run.seed, self.config.model.gradient_checkpointing
        )
        lm = hf_model(self.peft_model)
        trainable, total = parameter_counts(lm)
        self.log(
            f"[lora] {settings.describe()}: {len(wrapped)} layers; trainable parameters {trainable:,} of "
            f"{total:,} ({100 * trainable / total:.3f}%)"
        )
        return lm

    @property
    def _zero3(self) -> bool:
        return self.ds_config["zero_optimization"].get("stage") == 3

    def _setup_engine(self) -> None:
        self.engine, self.scheduler = initialize_engine(
            self.objective,
            self.config,
            self.ds_config,
            self.total_steps,
            self.runtime.use_ds_optimizer,
            mpu=self._sequence_groups,
        )
        if self.dims.tp > 1:
            self._attach_tensor_parallel()

    def _attach_tensor_parallel(self) -> None:
        """After AutoTP sharded the model: point the loss at the vocab-parallel head's columns."""
        self.dims = ds.tensor_parallel_dims(self.dims)
        vocab_slice = ds.vocab_slice_of_head(self.objective, self.dims)
        self.objective.use_vocab_parallel_head(vocab_slice, self.dims.tp_group)
        self.objective.set_loss_fn(self.objective.loss_fn.for_vocab_slice(vocab_slice))
        self.log(
            f"[tp] LM head columns [{vocab_slice.start}, {vocab_slice.end}) of {vocab_slice.vocab_size} on rank "
            f"{self.dims.rank}; the loss all-reduces digit-restricted partial sums over the tensor-parallel group"
        )

    def _setup_resume_and_logging(self) -> None:
        cfg = self.config
        if self._resume is not None:
            self.step = checkpoints.load(self.engine, self._resume, self.dims, self.config.lora.enabled, self.log)
            if any(o.step == self.step for o in self.overrides):
                self._apply_optimizer_settings()
        if cfg.loss.is_auto:
            self._resolve_auto_weight()
        if self.dims.is_main:
            removed = cut_back(self.output_dir / "metrics.jsonl", self.step)
            if removed:
                self.log(f"[resume] metrics.jsonl cut back to step {self.step} ({removed} later records removed)")
            write_status(self.output_dir, "running", self.step)
            self._status_written = True
            self.stop.status_dir = self.output_dir
            self.reporter = Reporter(
                self.output_dir,
                cfg.run.report_to,
                self.total_steps,
                self.step,
                self.output_dir.name,
                config_to_dict(cfg),
                cfg.run.wandb_project,
            )
            changed = {o.key: [o.saved, o.now] for o in self.overrides if o.step == self.step}
            if changed:
                self.reporter.log(ResumeRecord(self.step, str(self._resume.path), changed))
        if cfg.data.eval_generate and self.dims.tp > 1:
            self.log(
                "[eval] data.eval_generate is skipped with tp > 1 (generate needs full-vocabulary logits); "
                "evaluate the exported model with recipes/evaluate.py"
            )
        self.heldout = HeldOutEvaluator(
            self.data.eval_rows,
            self.data.eval_examples,
            self.vocab,
            self.tokenizer,
            self.pad_id,
            cfg.run.micro_batch_size,
            cfg.data.eval_generate,
            cfg.data.max_new_tokens,
            self.dims,
            self.runtime.device,
            synced_generation=self._zero3 and self.dims.world > 1,
            prompts=PromptFormat(cfg.data.prompt_format, self.tokenizer),
        )
        self.stop.step = self.step

    def _apply_optimizer_settings(self) -> None:
        """After loading a checkpoint with overridden keys: the optimizer's hyperparameters and the
        learning-rate schedule as this run's config says (the checkpoint restored its own), so
        that the step after the resumed one already uses them."""
        opt = self.config.optimizer
        groups = self.scheduler.optimizer.param_groups
        for index, group in enumerate(groups):
            group.update(initial_lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps)
            # optimizer.parameter_groups: the matrices' group (with weight decay) first, then the vectors'
            group["weight_decay"] = opt.weight_decay if index == 0 and len(groups) == 2 else group["weight_decay"]
        factor = warmup_cosine(self.total_steps, opt.warmup_ratio, opt.min_lr_ratio)
        self.scheduler.lr_lambdas = [factor] * len(groups)
        self.scheduler.base_lrs = [opt.lr] * len(groups)
        for group in groups:
            group["lr"] = opt.lr * factor(self.scheduler.last_epoch)
        self.scheduler._last_lr = [group["lr"] for group in groups]

    def _lora_settings(self) -> LoraSettings:
        lora = self.config.lora
        return LoraSettings(lora.r, lora.alpha, lora.dropout, tuple(lora.target_modules))

    # --- training ------------------------------------------------------------------------------
    def _evaluate(self, label: str, generate: bool = True) -> Optional[HeldOutResult]:
        with evaluation_attention(self.objective.lm, enabled=self.dims.sp > 1):
            result = self.heldout.evaluate(self.objective, self.step, label, generate)
        if result is not None:
            self.reporter.log(result.record)
        return result

    def maybe_evaluate(self) -> None:
        """The held-out teacher-forced metrics every ``run.eval_every`` steps, label "during" (not
        at the last step, whose "after" evaluation is the same measurement plus generation).
        Collective. Training does not see it: :meth:`HeldOutEvaluator.evaluate` runs in eval mode,
        restores train mode and forks the RNG, and the batches of a step depend on (seed, step) only."""
        every = self.config.run.eval_every
        if every and self.step % every == 0 and self.step < self.total_steps:
            result = self._evaluate("during", generate=False)
            if result is not None:
                self.during.append(result.record)

    def train(self) -> Optional[FinalRecord]:
        """Train to ``total_steps``; the final record, or None when a signal stopped the run."""
        if self.step == 0:
            self.before = self._evaluate("before")
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
            collate([items[i] for i in micro], self.pad_id).with_spans(self.vocab)
            for micro in self.plan.micro_batches(self.step, self.dims.dp_rank)
        ]
        check_target_ids(batches, self.output_vocab_size)
        return batches

    def _forward(
        self, batch: TokenBatch, counts: tuple[torch.Tensor, torch.Tensor], whole: bool = False
    ) -> dict[str, torch.Tensor]:
        """The objective through the engine on one micro-batch (on the device), with the global
        counts; under sequence parallelism on this rank's shard of it (its spans cut from the
        whole batch's), unless ``whole`` (evaluation attention, every rank the whole batch)."""
        if not whole:
            batch = shard_batch(batch, self.dims.sp_rank, self.dims.sp, self.pad_id)
        return self.engine(
            input_ids=batch.input_ids,
            targets=batch.targets,
            attention_mask=None if self.config.data.packing else batch.attention_mask,
            position_ids=batch.position_ids,
            num_tokens=counts[0],
            num_digits=counts[1],
            spans=self._spans_input(batch),
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

        def unit_terms(cpu_batch: TokenBatch) -> torch.Tensor:
            out = self._forward(cpu_batch.to(self.runtime.device), counts, whole=sequence_parallel)
            return torch.stack([out["ce"], out["aux"]])

        with evaluation_attention(self.objective.lm, enabled=sequence_parallel):
            return measure_auto_weight(
                self.objective,
                batches,
                unit_terms,
                functools.partial(sum_over, group=self.dims.dp_group),
                self.config.loss.auto_ratio,
                self._rng_devices(),
                dtype=torch.float32,
            )

    def _rng_devices(self) -> list[int]:
        return [self.runtime.device.index or 0] if self.runtime.device.type == "cuda" else []

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
        for cpu_batch in batches:
            batch = cpu_batch.to(self.runtime.device)  # non-blocking from pinned memory on a GPU
            out = self._forward(batch, counts)
            # Each micro-batch loss is already divided by the global counts: the gradient wanted is
            # the plain sum over micro-batches and ranks, which DeepSpeed averages over.
            self.engine.backward(out["loss"] * self._gradient_divisor, scale_wrt_gas=False)
            self.engine.step()
            sums.add(out)
        self.step += 1
        self.stop.step = self.step
        readout = read_step(
            sums,
            counts,
            ds.grad_norm(self.engine),
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
            self.log(f"[stop] signal received: checkpoint of step {self.step} written; resume with:")
            self.log("  " + shlex.join([os.path.basename(sys.executable), *sys.argv, "run.resume=auto"]))
            if self.dims.is_main:
                write_status(self.output_dir, "stopped", self.step)
            barrier()
        return stop_now

    def save_checkpoint(self) -> Path:
        state = {"identity": self.identity, "overrides": [dataclasses.asdict(o) for o in self.overrides]}
        return checkpoints.save(
            self.engine,
            self.output_dir,
            self.step,
            state,
            self.dims,
            self.config.run.save_total_limit,
            self.log,
            exclude_frozen=self.config.lora.enabled,
        )

    # --- the end -------------------------------------------------------------------------------
    def finish(self, train_time_s: float) -> FinalRecord:
        """The last checkpoint, the held-out evaluation, the export and the final record."""
        run = self.config.run
        if run.save_every and self.step % run.save_every:
            self.save_checkpoint()
        self.after = self._evaluate("after")
        if run.export:
            self.export()
        final = FinalRecord(
            self.step, train_time_s, self.last, self.before and self.before.record, self.after and self.after.record
        )
        self.reporter.log(final, console=False)
        if self.dims.is_main:
            print_summary(self.before, self.after, self.data.eval_rows, self.log, self.during)
            self._write_answers()
            write_status(self.output_dir, "finished", self.step)
        return final

    def _write_answers(self) -> None:
        """OUTPUT_DIR/heldout_answers.jsonl: the greedy answers before and after, problem by problem."""
        if self.after is None or not self.after.answers:
            return
        rows = self.data.eval_rows[: len(self.after.answers)]
        before = self.before.answers if self.before is not None and len(self.before.answers) == len(rows) else []
        write_jsonl(self.output_dir / HELDOUT_ANSWERS, answer_records(rows, before, self.after.answers))
        self.log(f"[eval] greedy answers before and after written to {self.output_dir / HELDOUT_ANSWERS}")

    def export(self) -> None:
        """Gather the full weights once and write OUTPUT_DIR/final in Hugging Face format; with
        LoRA the adapters merged into the base weights there, and the adapter in final/adapter."""
        started = time.time()
        state = ds.full_state_dict(self.engine, self.objective, self._zero3 or self.dims.tp > 1, self.dims.is_main)
        if self.dims.is_main:
            prefix = "lm."
            state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            write_adapter = None
            if self.peft_model is not None:
                write_adapter = self._adapter_writer(state)
                state = merged_state_dict(self.objective.lm, state)
            drop_tied_copies(self.objective.lm, state)
            target = self.output_dir / "final"
            recipe = {"del_recipe.yaml": config_to_yaml(self.config)}
            save_hf(self.objective.lm, state, self.tokenizer, target, recipe, write_adapter)
            adapter = f" (merged; LoRA adapter in {target / 'adapter'})" if write_adapter else ""
            self.log(f"[export] Hugging Face model written to {target}{adapter} in {time.time() - started:.1f} s")
        barrier()

    def _adapter_writer(self, state: dict) -> Callable[[Path], None]:
        """Writes the PEFT adapter of the gathered ``state`` into ``<staging>/adapter``."""

        def write(staging: Path) -> None:
            save_adapter(self.peft_model, state, staging / "adapter")

        return write

    def mark_failed(self) -> None:
        """An exception ends the run: rank 0's status says so (never left "running")."""
        if self._status_written:
            write_status(self.output_dir, "failed", self.step)

    def cleanup(self) -> None:
        """Close the reporters' files and release OUTPUT_DIR's lock (the process group is torn
        down by the entry point)."""
        self.reporter.close()
        if self.lock is not None:
            self.lock.release()


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
