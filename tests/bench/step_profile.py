"""The training recipe's optimizer step vs ``transformers.Trainer`` on the same work, and where the step goes.

    python tests/bench/step_profile.py                      # the CPU table (SmolLM2-135M-Instruct): 24 runs,
                                                            # about 15 minutes on 2 quiet cores
    python tests/bench/step_profile.py --report runs.json   # the tables of a --json file (also an interrupted one)
    python tests/bench/step_profile.py --quick              # a tiny model, ~1-2 minutes (the CI smoke test)
    python tests/bench/step_profile.py --zero 3 --losses del --nprocs 1 --rounds 5 --json out.json

Each measurement is a fresh process (``torchrun --nproc_per_node N`` for N > 1, gloo on CPU) that
runs ``--steps`` optimizer steps of one side:

* ``trainer``: :class:`del_core.training.trainer.Trainer` (``recipes/train.py``) set up from its
  config and stepped by the production loop body (``train_step``, ``maybe_evaluate``,
  ``maybe_checkpoint``), metrics.jsonl written every step;
* ``hf``: ``transformers.Trainer`` with the same DeepSpeed file (``ds_configs/zero{2,3}.json``, its
  "auto" values filled by transformers) for ``mle`` (the model's own shifted cross-entropy over
  the step's target tokens), and this project's :class:`del_core.integrations.DELTrainer` for
  ``del``; ``logging_steps=1`` (a logged record every step, like the trainer).

The same on both sides: the model (``load_model``: fp32, sdpa attention, no gradient
checkpointing), the rows (Alpaca rows with numbers, all cut to exactly ``--length`` tokens by
the trainer's own tokenisation; the HF side gets the same examples with its unshifted labels, in
the trainer's order: each step trains the trainer's examples of that step),
global batch ``--batch`` = micro ``--micro`` x accumulation x processes, torch AdamW (fused;
lr, betas, eps, weight decay alike), gradient clipping 1.0, the loss normalised over the global
batch's target tokens (and digits for DEL), DEL's lambda fixed (``--del-weight``).

A round runs every (side, loss, processes) cell once, the sides of a cell back to back in an
order that alternates between rounds, so a shared machine's drift falls on both alike. Step time:
the interval between consecutive optimizer-step ends (data, forward, backward, optimizer,
logging: everything a step costs), the median of the steps after ``--warmup``; per cell the
median over rounds with the min-max over rounds. Ratio: trainer / hf per round (paired), median
and min-max. Peak memory: the largest ``ru_maxrss`` over the ranks (the whole process, set-up
included: loading the model is the same on both sides). OMP threads per rank: ``--threads``.

The phase split (trainer only, rank 0, the timed steps): wall-clock timers wrapped around the
trainer's own calls by this script (nothing in the production path); on CPU every op is
synchronous, so a timer adds no sync and measures its phase exactly:

  data      ``_micro_batches`` (collation, number spans, target-id check)
  counts    ``step_counts`` (the global normalisers, all-reduced)
  forward   the model's forward (``objective.lm``)
  loss      the loss (the loss path's ``score``, in the objective's forward)
  engine    the rest of DeepSpeed's forward (its hooks around the module)
  backward  ``engine.backward`` (with ZeRO-2's gradient hooks: bucketing and reducing as gradients come)
  optimizer ``engine.step`` (at the boundary: the last buckets, grad norm and clipping, AdamW, zeroing)
  read      ``read_step`` (the one host read of the step)
  logging   the reporter's record and progress line
  bookkeeping ``maybe_evaluate`` + ``maybe_checkpoint`` (nothing due here: the per-step checks)
  other     the rest of the interval (host-to-device copies, summing the metrics, the record, the loop)

On a GPU the timers would need a sync each: use ``--no-phases`` there (the device check does).
Output: a progress line per run on stderr, the markdown tables on stdout; ``--json`` keeps the
per-run results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # tests/helpers, in the driver and in every worker
SIDES = ("trainer", "hf")
PHASES = (
    "data",
    "counts",
    "forward",
    "loss",
    "engine",
    "backward",
    "optimizer",
    "read",
    "logging",
    "bookkeeping",
    "other",
)
LR, BETAS, EPS, WEIGHT_DECAY, SEED = 1e-5, (0.9, 0.999), 1e-8, 0.01, 0


# --- the rows -----------------------------------------------------------------------------------
def write_rows(path: Path, n_rows: int) -> None:
    """Alpaca rows whose outputs are long runs of additions: longer than any ``--length``, so the
    tokenisation cuts every example to exactly that many tokens, about a third of them digits."""
    rng = random.Random(SEED)
    with path.open("w") as out:
        for _ in range(n_rows):
            sums = []
            for _ in range(200):
                a, b = rng.randrange(10**5), rng.randrange(10**5)
                sums.append(f"{a} + {b} = {a + b}.")
            row = {"instruction": "Add the numbers.", "input": "", "output": " ".join(sums)}
            out.write(json.dumps(row) + "\n")


def quick_model(directory: Path, tokenizer_source: str) -> Path:
    """A random-initialised 2-layer Llama (hidden 64, tied head) with SmolLM2's tokenizer."""
    from transformers import AutoTokenizer

    from helpers.tiny_models import save_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    shape = dict(hidden=64, layers=2, heads=4, kv_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)
    return save_tiny_model(directory, tokenizer, "llama", **shape, bos_token_id=tokenizer.bos_token_id, seed=SEED)


# --- one run (a worker process, one per rank) ------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    side: str
    loss: str
    nproc: int
    model: str
    rows: str
    cache: str
    length: int
    batch: int
    micro: int
    steps: int
    zero: int
    del_weight: float
    phases: bool
    device: str = "cpu"  # cuda: bf16 on both sides, peak memory from the CUDA allocator
    trainer_set: tuple[str, ...] = ()  # further recipes/train.py overrides (trainer only)

    @property
    def precision(self) -> str:
        return "bf16" if self.device == "cuda" else "fp32"

    def overrides(self, output_dir: str) -> list[str]:
        """The trainer's config for this run (recipes/train.py keys)."""
        weight = f"loss.weight={self.del_weight}" if self.loss == "del" else "loss.weight="
        return [
            f"model.name={self.model}",
            "model.gradient_checkpointing=false",
            f"model.precision={self.precision}",
            f"model.cache_dir={self.cache}",
            f"loss.name={self.loss}",
            weight,
            f"data.source={self.rows}",
            f"data.cache_dir={self.cache}/data",
            "data.eval_size=0",
            "data.eval_generate=0",
            "data.prompt_format=alpaca",
            f"data.max_length={self.length}",
            "data.num_proc=1",
            "optimizer.name=torch",
            f"optimizer.lr={LR}",
            f"optimizer.betas=[{BETAS[0]}, {BETAS[1]}]",
            f"optimizer.eps={EPS}",
            f"optimizer.weight_decay={WEIGHT_DECAY}",
            "optimizer.warmup_ratio=0.0",
            "optimizer.grad_clip=1.0",
            f"parallel.zero_stage={self.zero}",
            f"run.global_batch_size={self.batch}",
            f"run.micro_batch_size={self.micro}",
            f"run.max_steps={self.steps}",
            f"run.seed={SEED}",
            f"run.output_dir={output_dir}",
            "run.save_every=0",
            "run.export=false",
            "run.report_to=[jsonl]",
            "run.log_every=1",
            "run.overwrite=true",
            *self.trainer_set,
        ]


CLOCKS = ("wall", "cpu")  # the phase split in wall seconds and in this process's CPU seconds


class PhaseTimers:
    """Seconds per phase on both clocks, accumulated by wrappers around the trainer's calls."""

    def __init__(self) -> None:
        self.seconds = {kind: dict.fromkeys(PHASES, 0.0) for kind in CLOCKS}
        self.steps: list[dict[str, dict[str, float]]] = []

    def add(self, phase: str, started: tuple[float, float]) -> None:
        for kind, now, then in zip(CLOCKS, clock(), started):
            self.seconds[kind][phase] += now - then

    def inner(self) -> tuple[float, float]:
        """The forward and loss seconds so far on both clocks (the engine's forward holds them)."""
        return tuple(self.seconds[kind]["forward"] + self.seconds[kind]["loss"] for kind in CLOCKS)

    def wrap(self, phase: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(phase, started)

        return timed

    def end_step(self, interval: tuple[float, float]) -> None:
        """Close a step of ``interval`` (wall, cpu) seconds: "other" is what no phase timed."""
        step = {}
        for kind, total in zip(CLOCKS, interval):
            phases = dict(self.seconds[kind])
            phases["other"] = total - sum(v for k, v in phases.items() if k != "other")
            step[kind] = phases
        self.steps.append(step)
        self.seconds = {kind: dict.fromkeys(PHASES, 0.0) for kind in CLOCKS}


def install_phase_timers(trainer: Any, timers: PhaseTimers) -> None:
    """Wrap the trainer's calls (module functions the step looks up at call time, and the methods
    of its objects) so that each adds its time to its phase. The model and loss are timed inside
    the engine's forward: "engine" is the forward's remainder."""
    from del_core.training import trainer as trainer_module

    trainer_module.step_counts = timers.wrap("counts", trainer_module.step_counts)
    trainer_module.read_step = timers.wrap("read", trainer_module.read_step)
    path = trainer.objective.path
    path.score = timers.wrap("loss", path.score)
    trainer._micro_batches = timers.wrap("data", trainer._micro_batches)
    trainer.maybe_evaluate = timers.wrap("bookkeeping", trainer.maybe_evaluate)
    trainer.maybe_checkpoint = timers.wrap("bookkeeping", trainer.maybe_checkpoint)
    lm = trainer.objective.lm
    lm.forward = timers.wrap("forward", lm.forward)
    engine = trainer.engine
    forward = engine.forward

    def engine_forward(*args: Any, **kwargs: Any) -> Any:
        before, started = timers.inner(), clock()
        try:
            return forward(*args, **kwargs)
        finally:
            timers.add("engine", started)
            for kind, now, then in zip(CLOCKS, timers.inner(), before):
                timers.seconds[kind]["engine"] -= now - then

    engine.forward = engine_forward
    engine.backward = timers.wrap("backward", engine.backward)
    engine.step = timers.wrap("optimizer", engine.step)
    reporter = trainer.reporter
    reporter.log = timers.wrap("logging", reporter.log)
    reporter.advance = timers.wrap("logging", reporter.advance)


def clock() -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds): the CPU time of a step is what it computed,
    much less disturbed than its wall time by other work on a shared machine."""
    return time.perf_counter(), time.process_time()


@dataclass
class SideRun:
    """What one side's run measured on one rank."""

    ends: list[tuple[float, float]]  # (wall, cpu) clocks at the start and at every optimizer step's end
    timers: Optional[PhaseTimers]  # the trainer's phase split (trainer sides with phases only)
    setup_rss_gb: float  # resident set once set up (the trainer), or before DeepSpeed's set-up (HF sides)
    ds_config: dict  # the config DeepSpeed's engine got
    step_targets: list[int]  # target tokens (label not -100) of each optimizer step on this rank

    def result(self, device: str) -> dict:
        """The rank's JSON record: step intervals, phases, memory, target tokens."""
        ends = self.ends
        return {
            "intervals": [b[0] - a[0] for a, b in zip(ends, ends[1:])],
            "cpu_intervals": [b[1] - a[1] for a, b in zip(ends, ends[1:])],
            "ds_config": json.loads(json.dumps(self.ds_config, default=str)),
            "phases": self.timers.steps if self.timers is not None else None,
            "peak_rss_gb": peak_memory_gb(device),
            "setup_rss_gb": self.setup_rss_gb,
            "step_targets": self.step_targets,
        }


def count_step_targets(trainer: Any, step_targets: list[int]) -> None:
    """Append the target tokens of this rank's micro-batches of every step to ``step_targets``."""
    micro_batches = trainer._micro_batches

    def counted() -> list:
        batches = micro_batches()
        step_targets.append(sum(int((batch.targets != -100).sum()) for batch in batches))
        return batches

    trainer._micro_batches = counted


def run_trainer(spec: RunSpec, output_dir: str) -> SideRun:
    """The recipe's trainer stepped by the production loop body."""
    import psutil

    from del_core.training.config import load_train_config
    from del_core.training.trainer import Trainer

    trainer = Trainer(load_train_config(None, spec.overrides(output_dir)))
    timers = PhaseTimers() if spec.phases else None
    try:
        trainer.setup()
        setup_rss = psutil.Process().memory_info().rss / 1e9
        step_targets: list[int] = []
        count_step_targets(trainer, step_targets)
        if timers is not None:
            install_phase_timers(trainer, timers)
        ends = [clock()]
        while trainer.step < trainer.total_steps:
            trainer.last = trainer.train_step()
            trainer.maybe_evaluate()
            trainer.maybe_checkpoint()
            ends.append(clock())
            if timers is not None:
                timers.end_step((ends[-1][0] - ends[-2][0], ends[-1][1] - ends[-2][1]))
    finally:
        trainer.cleanup()
    # FSDP2's engine has no DeepSpeed config
    return SideRun(ends, timers, setup_rss, getattr(trainer.engine, "config", {}), step_targets)


def hf_dataset(spec: RunSpec, output_dir: str) -> tuple[list[dict], Any, str]:
    """The trainer's own examples of ``spec.rows`` (same tokenizer, template and cut) as HF rows
    with unshifted labels (labels[t + 1] = targets[t]), the tokenizer and the model directory.
    The rows are in the order the trainer's :class:`StepPlan` takes them, step by step, so that a
    sequential sampler gives every (step, micro-step, rank) the trainer's examples (a sharded
    sequential loader deals micro-batch k to rank k mod processes, as the plan does)."""
    from del_core.data.tokenized import IGNORE_INDEX
    from del_core.models import resolve_model
    from del_core.tokenizers import load_tokenizer
    from del_core.training.config import load_train_config
    from del_core.training.schedule import StepPlan
    from del_core.training.trainer import training_data

    config = load_train_config(None, spec.overrides(output_dir))
    cache = Path(spec.cache)
    model_dir = resolve_model(config.model.name, cache)
    tokenizer = load_tokenizer(model_dir, cache / "tokenizers")
    items = training_data(config, tokenizer, lambda text: None).items
    plan = StepPlan(len(items), spec.batch, spec.micro, spec.nproc, config.run.seed)
    rows = []
    for item in (items[i] for step in range(spec.steps) for i in plan.global_batch_items(step)):
        ids, targets = list(item.input_ids), list(item.targets)
        rows.append({"input_ids": ids, "labels": [IGNORE_INDEX, *targets[:-1]], "attention_mask": [1] * len(ids)})
    return rows, tokenizer, model_dir


def hf_arguments(spec: RunSpec, output_dir: str) -> dict[str, Any]:
    """The ``TrainingArguments`` keywords of the HF-based sides (``SFTConfig`` takes them too)."""
    on_gpu = spec.device == "cuda"
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=spec.micro,
        gradient_accumulation_steps=spec.batch // (spec.micro * spec.nproc),
        max_steps=spec.steps,
        learning_rate=LR,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=EPS,
        weight_decay=WEIGHT_DECAY,
        max_grad_norm=1.0,
        lr_scheduler_type="cosine",
        warmup_steps=0,
        optim="adamw_torch_fused",  # transformers' default; the trainer's torch_adamw is fused too
        deepspeed=str(REPO / "ds_configs" / f"zero{spec.zero}.json"),
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not on_gpu,
        bf16=on_gpu,
        seed=SEED,
        dataloader_num_workers=0,
        disable_tqdm=True,
        ddp_backend="gloo" if spec.nproc > 1 else None,
        train_sampling_strategy="sequential",  # hf_dataset's rows are already in the trainer's step order
    )


def hf_model(spec: RunSpec, model_dir: str) -> Any:
    """The model as the trainer loads it: fp32 (bf16 on cuda), sdpa, no gradient checkpointing."""
    import torch

    from del_core.models import load_model

    torch.manual_seed(SEED)
    return load_model(model_dir, torch.bfloat16 if spec.device == "cuda" else torch.float32, "sdpa", False)


def train_hf(trainer: Any) -> SideRun:
    """Train a constructed ``transformers.Trainer`` (or subclass): the clock at the start and at
    every step's end, and each step's target tokens (shifted labels not -100, counted on the
    micro-batches ``compute_loss`` gets)."""
    import psutil
    from transformers import TrainerCallback

    ends: list[tuple[float, float]] = []
    step_targets = [0]

    class StepEnds(TrainerCallback):
        def on_train_begin(self, *_: Any, **__: Any) -> None:
            ends.append(clock())

        def on_step_end(self, *_: Any, **__: Any) -> None:
            ends.append(clock())
            step_targets.append(0)

    compute_loss = trainer.compute_loss

    def counted(model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
        step_targets[-1] += int((inputs["labels"][..., 1:] != -100).sum())
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = counted
    trainer.add_callback(StepEnds())
    setup_rss = psutil.Process().memory_info().rss / 1e9
    trainer.train()
    return SideRun(ends, None, setup_rss, trainer.model_wrapped.config, step_targets[:-1])


def run_hf(spec: RunSpec, output_dir: str) -> SideRun:
    """transformers.Trainer (DELTrainer for del) on :func:`hf_dataset`'s rows."""
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments, default_data_collator

    from del_core.integrations import DELTrainer

    rows, tokenizer, model_dir = hf_dataset(spec, output_dir)
    # Rows of one length stack as they are; rows of several lengths are padded per micro-batch
    # (labels with -100), as a user of transformers.Trainer would for pre-tokenised SFT data.
    one_length = len({len(row["input_ids"]) for row in rows}) == 1
    collator = default_data_collator if one_length else DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    common = dict(
        model=hf_model(spec, model_dir),
        args=TrainingArguments(**hf_arguments(spec, output_dir)),
        train_dataset=rows,
        data_collator=collator,
        processing_class=tokenizer,
    )
    if spec.loss == "mle":
        return train_hf(Trainer(**common))
    return train_hf(DELTrainer(**common, loss=spec.loss, loss_weight=spec.del_weight))


def peak_memory_gb(device: str) -> float:
    """This process's peak: resident set (CPU), or the CUDA allocator's peak (GPU)."""
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


RUNNERS = {"trainer": run_trainer, "hf": run_hf}  # side -> its run on one rank


def worker(spec: RunSpec, out: Path, runners: Optional[dict[str, Any]] = None) -> None:
    """One rank of one run of ``spec.side`` (``runners``: side -> run function, :data:`RUNNERS`
    by default): writes ``out/rank<R>.json`` (:meth:`SideRun.result`)."""
    rank = int(os.environ.get("RANK", "0"))
    run = (runners or RUNNERS)[spec.side](spec, str(out / "output"))
    (out / f"rank{rank}.json").write_text(json.dumps(run.result(spec.device)))


# --- the driver -----------------------------------------------------------------------------------
@dataclass
class RunResult:
    side: str
    loss: str
    nproc: int
    round: int
    step_s: float  # median interval after the warm-up, rank 0
    cpu_s: float  # median CPU seconds of rank 0's process per step after the warm-up
    peak_gb: float  # max over ranks
    setup_gb: float
    phases: Optional[dict[str, dict[str, float]]]  # clock -> phase -> median over the timed steps (trainer, rank 0)
    ds_config: dict  # the config DeepSpeed's engine got (rank 0)
    step_targets: list[int] = field(default_factory=list)  # target tokens of each step, summed over ranks


def launch(spec: RunSpec, args: argparse.Namespace, run_dir: Path, script: Optional[Path] = None) -> dict:
    """Run ``spec`` in fresh processes of ``script``'s ``--worker`` (this file by default); the
    ranks' records by rank."""
    run_dir.mkdir(parents=True)
    from del_core.parallel.rendezvous import free_port
    from helpers.torchrun import torchrun_command

    entry = (script or Path(__file__)).resolve()
    worker_args = [str(entry), "--worker", json.dumps(spec.__dict__), "--out", str(run_dir)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    if spec.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if spec.nproc == 1:  # a one-rank process group, as the trainer makes without a launcher
        command = [sys.executable, *worker_args]
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    else:
        command = torchrun_command(spec.nproc, *worker_args)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"{spec.side} {spec.loss} x{spec.nproc}: exit {done.returncode}")
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in run_dir.glob("rank*.json")}


def summarise(spec: RunSpec, ranks: dict, round_index: int, warmup: int) -> RunResult:
    main = ranks[0]
    timed = main["intervals"][warmup:]
    phases = None
    if main["phases"]:
        steps = main["phases"][warmup:]
        phases = {kind: {name: statistics.median(s[kind][name] for s in steps) for name in PHASES} for kind in CLOCKS}
    return RunResult(
        spec.side,
        spec.loss,
        spec.nproc,
        round_index,
        statistics.median(timed),
        statistics.median(main["cpu_intervals"][warmup:]),
        max(r["peak_rss_gb"] for r in ranks.values()),
        max(r["setup_rss_gb"] for r in ranks.values()),
        phases,
        main["ds_config"],
        [sum(step) for step in zip(*(r["step_targets"] for r in ranks.values()))],
    )


# Keys the sides write differently with the same meaning: the trainer states train_batch_size
# (transformers leaves DeepSpeed to derive it from micro x accumulation x ranks), transformers
# states fp16.enabled=false (absent is off), and either side's steps_per_print never prints.
SAME_MEANING = ("train_batch_size", "fp16.enabled", "steps_per_print")


def config_differences(results: list[RunResult]) -> list[str]:
    """The DeepSpeed config keys whose values differ between the sides of a cell (flattened),
    but for :data:`SAME_MEANING`."""

    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(node, dict):
            return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): node}

    lines = []
    for loss, nproc in sorted({(r.loss, r.nproc) for r in results}):
        configs = {r.side: flat(r.ds_config) for r in results if (r.loss, r.nproc, r.round) == (loss, nproc, 0)}
        ours, theirs = configs.get("trainer", {}), configs.get("hf", {})
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key) != theirs.get(key) and key not in SAME_MEANING:
                lines.append(f"{loss} x{nproc}: {key}: trainer {ours.get(key, '-')!r}, hf {theirs.get(key, '-')!r}")
    return lines


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def cell_summaries(results: list[RunResult]) -> list[dict]:
    """Per (loss, processes): each side's step time, CPU time and peak memory over rounds, and the
    paired per-round ratios trainer / hf (median, min, max)."""
    cells = sorted({(r.loss, r.nproc) for r in results}, key=lambda c: (c[1], c[0] != "mle", c[0]))
    summaries = []
    for loss, nproc in cells:
        cell = [r for r in results if (r.loss, r.nproc) == (loss, nproc)]
        ours, theirs = ({r.round: r for r in cell if r.side == side} for side in SIDES)
        pairs = [(ours[i], theirs[i]) for i in sorted(set(ours) & set(theirs))]  # the rounds with both sides
        if not pairs:
            continue
        summaries.append(
            {
                "loss": loss,
                "nproc": nproc,
                "rounds": len(pairs),
                "trainer_step_s": _stats([a.step_s for a, _ in pairs]),
                "hf_step_s": _stats([b.step_s for _, b in pairs]),
                "time_ratio": _stats([a.step_s / b.step_s for a, b in pairs]),
                "cpu_time_ratio": _stats([a.cpu_s / b.cpu_s for a, b in pairs]),
                "trainer_peak_gb": _stats([a.peak_gb for a, _ in pairs]),
                "hf_peak_gb": _stats([b.peak_gb for _, b in pairs]),
                "memory_ratio": _stats([a.peak_gb / b.peak_gb for a, b in pairs]),
            }
        )
    return summaries


def _spread(stats: dict[str, float], digits: int = 2) -> str:
    return f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}-{stats['max']:.{digits}f})"


def tables(results: list[RunResult]) -> str:
    """The comparison table, and the trainer's phase split when it was timed (markdown)."""
    summaries = cell_summaries(results)
    lines = [
        "| loss | procs | trainer step s | hf step s | time ratio trainer/hf | cpu-time ratio trainer/hf "
        "| trainer peak GB | hf peak GB | mem ratio trainer/hf |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in summaries:
        lines.append(
            f"| {c['loss']} | {c['nproc']} | {_spread(c['trainer_step_s'], 3)} | {_spread(c['hf_step_s'], 3)} "
            f"| {_spread(c['time_ratio'])} | {_spread(c['cpu_time_ratio'])} | {_spread(c['trainer_peak_gb'])} "
            f"| {_spread(c['hf_peak_gb'])} | {_spread(c['memory_ratio'])} |"
        )
    phased = [r for r in results if r.phases]
    if phased:
        lines += [
            "",
            "Trainer phase split (rank 0; wall and CPU seconds per step: median over timed steps, then rounds):",
            "",
        ]
        lines.append("| loss | procs | clock | " + " | ".join(PHASES) + " | step |")
        lines.append("|---|---|---|" + "---|" * (len(PHASES) + 1))
        for loss, nproc in ((c["loss"], c["nproc"]) for c in summaries):
            runs = [r for r in phased if (r.loss, r.nproc) == (loss, nproc)]
            for kind, step in (("wall", [r.step_s for r in runs]), ("cpu", [r.cpu_s for r in runs])):
                values = [statistics.median(r.phases[kind][name] for r in runs) for name in PHASES]
                cells = " | ".join(f"{v:.3f}" for v in values)
                lines.append(f"| {loss} | {nproc} | {kind} | {cells} | {statistics.median(step):.3f} |")
    return "\n".join(lines)


def prepare(args: argparse.Namespace, work: Path) -> tuple[str, str]:
    """(model source, rows file): the rows written, and with --quick the tiny model saved."""
    rows = work / "rows.jsonl"
    write_rows(rows, max(64, 4 * args.batch * args.steps))
    model = args.model
    if args.quick and model == "smollm2":
        from del_core.models import resolve_model

        model = str(quick_model(work / "tiny-model", resolve_model("smollm2", Path(args.cache))))
    return model, str(rows)


def argument_parser(description: str) -> argparse.ArgumentParser:
    """The options of a run of sides (this script's and those that reuse its parts)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="short rows, at most 2 rounds of 4 steps; a tiny model unless --model"
    )
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--losses", default="mle,del")
    parser.add_argument("--nprocs", default="1,2")
    parser.add_argument("--zero", type=int, default=2, choices=(2, 3))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="first step intervals not timed")
    parser.add_argument("--length", type=int, default=128, help="tokens per row")
    parser.add_argument("--batch", type=int, default=4, help="global batch (rows per optimizer step)")
    parser.add_argument("--micro", type=int, default=2, help="rows per forward on one rank")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads per rank")
    parser.add_argument("--del-weight", type=float, default=0.128)
    parser.add_argument("--no-phases", dest="phases", action="store_false")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: bf16, no phase timers")
    parser.add_argument("--cache", default=os.environ.get("DEL_CACHE_DIR", str(Path.home() / ".cache" / "del_core")))
    parser.add_argument(
        "--trainer-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further recipes/train.py override of the trainer side (repeatable): run.report_to=[jsonl,tensorboard]",
    )
    parser.add_argument("--json", help="write the per-run results here (rewritten after every run)")
    parser.add_argument("--report", help="print the tables of a --json file (of a finished or interrupted table)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser


def finish_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """The parsed options made consistent: lists split, --quick's shapes, no phase timers on cuda."""
    args.losses = args.losses.split(",")
    args.nprocs = [int(n) for n in args.nprocs.split(",")]
    if args.quick:
        args.rounds, args.steps, args.warmup, args.length = min(args.rounds, 2), 4, 1, 64
    if args.device == "cuda":
        args.phases = False  # a phase timer would need a device sync
    if args.steps - args.warmup < 1:
        parser.error("--steps must exceed --warmup")
    return args


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argument_parser(__doc__)
    return finish_args(parser, parser.parse_args(argv))


def one_run(args: argparse.Namespace, work: Path, spec: RunSpec, round_index: int) -> RunResult:
    """Launch one run, summarise it and print its progress line."""
    run_dir = work / f"r{round_index}-{spec.side}-{spec.loss}-{spec.nproc}"
    result = summarise(spec, launch(spec, args, run_dir), round_index, args.warmup)
    print(
        f"round {round_index + 1}/{args.rounds} {spec.side:7s} {spec.loss} x{spec.nproc}: step {result.step_s:.3f} s "
        f"(cpu {result.cpu_s:.3f} s), peak {result.peak_gb:.2f} GB (after set-up {result.setup_gb:.2f}), "
        f"load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
        flush=True,
    )
    return result


def measure(args: argparse.Namespace) -> list[RunResult]:
    """Every run of the rounds, in the order run (progress lines on stderr)."""
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="step_profile_") as tmp:
        work = Path(tmp)
        model, rows = prepare(args, work)
        print(
            f"# step_profile: {'quick (tiny model)' if args.quick else model}, ZeRO-{args.zero}, "
            f"{'bf16 on cuda' if args.device == 'cuda' else 'fp32 on CPU'}, "
            f"{args.length} tokens x global batch {args.batch} (micro {args.micro}), {args.steps} steps "
            f"({args.warmup} warm-up), {args.rounds} rounds, {args.threads} thread(s) per rank, load "
            f"{os.getloadavg()[0]:.1f}",
            file=sys.stderr,
            flush=True,
        )
        for round_index in range(args.rounds):
            for nproc in args.nprocs:
                for loss in args.losses:
                    for side in SIDES if round_index % 2 == 0 else SIDES[::-1]:
                        phases = args.phases and side == "trainer"
                        spec = RunSpec(
                            side, loss, nproc, model, rows, args.cache, args.length, args.batch, args.micro,
                            args.steps, args.zero, args.del_weight, phases, args.device, tuple(args.trainer_set),
                        )  # fmt: skip
                        results.append(one_run(args, work, spec, round_index))
                        if args.json:  # after every run: an interrupted table keeps its finished runs
                            Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return results


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.worker:
        worker(RunSpec(**json.loads(args.worker)), Path(args.out))
        return
    if args.report:
        print(tables([RunResult(**run) for run in json.loads(Path(args.report).read_text())]))
        return
    started = time.time()
    results = measure(args)
    print(tables(results))
    differences = config_differences(results)
    same = "the same (up to " + ", ".join(SAME_MEANING) + ": written differently, same meaning)"
    print("\nDeepSpeed config the engines got, trainer vs hf: " + (same if not differences else "differs:"))
    for line in differences:
        print("  " + line)
    print(f"\n({time.time() - started:.0f} s in all; command: python tests/bench/step_profile.py {' '.join(argv)})")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
