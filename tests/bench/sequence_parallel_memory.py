"""Per-rank activation and loss memory of a training step under Ulysses sequence parallelism, measured
on the CPU and compared with the memory model (``del_core/memory_model.py``).

Run (not part of CI; the default takes ~17 minutes on 2 busy CPU cores)::

    python tests/bench/sequence_parallel_memory.py                   # T = 2K/4K/8K x SP = 1/2/4
    python tests/bench/sequence_parallel_memory.py --quick           # T = 1K x SP = 1/2, ~3 minutes
    python tests/bench/sequence_parallel_memory.py --check-model     # the model's terms, one process

Each (T, SP) point is one ``torchrun --nproc_per_node SP`` run of the project's trainer
(``del_core.training.trainer.Trainer``, i.e. ``recipes/train.py`` with ``parallel.sp=SP``; gloo,
fp32, ZeRO-3, DEL, micro-batch 1, one sequence of exactly T tokens per step, so data parallel is 1
and every rank holds T / SP tokens). The model is a random tiny Qwen2 (hidden 256, intermediate
1024, 4 layers, 4 heads, 2 key-value heads, tied head) with a character-level tokenizer of 100
tokens, so that the activations, not the LM head, fill the memory. After one warm-up step, each
of ``--repeats`` steps is measured on every rank in two ways at once:

* **live bytes** (``live_bytes.py``): the exact peak of the tensor storages the step creates and
  holds at the same time (activations, loss buffers, the step's transients), forward, backward and
  optimizer step; everything alive before the step (weights, gradient and optimizer buffers) is
  excluded. This is what the memory model's ``activation_peak`` predicts.
* **peak RSS** (``bench_common``): the process's resident memory sampled every 1 ms during the
  step, minus the RSS just before it (allocations over 64 KiB are their own mappings, returned to
  the system when freed). It includes what live bytes cannot see (allocator slack, gloo buffers).

The table gives the median over repeats and ranks with its range, the prediction, and each
column's ratio to SP = 1 at the same T (ideally 1 / SP).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import string
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(HERE)]

from del_core.data.sequence_shards import padded_length  # noqa: E402
from del_core.memory_model import ModelShape, TrainShape, estimate  # noqa: E402
from helpers.tiny_models import tiny_causal_lm  # noqa: E402
from helpers.torchrun import torchrun_command  # noqa: E402

BENCH_MODEL = ModelShape(
    hidden=256, intermediate=1024, layers=4, heads=4, kv_heads=2, vocab=100, qkv_bias=True, tied_embeddings=True
)
QUICK_MODEL = ModelShape(
    hidden=128, intermediate=512, layers=2, heads=4, kv_heads=2, vocab=100, qkv_bias=True, tied_embeddings=True
)
TOKEN_CHARS = [c for c in string.printable if c not in "\x0b\x0c\r"]
SPECIAL_TOKENS = ("<unk>", "<pad>", "<eos>")
MB = 1e6


@dataclass(frozen=True)
class Point:
    """One (T, SP) run's measurements: per rank, per measured step."""

    seq_len: int
    sp: int
    live_bytes: list[list[int]]  # [rank][repeat]
    rss_bytes: list[list[int]]


def qwen2_model(shape: ModelShape, max_len: int, tied: bool, **extra):
    """A random Qwen2 of ``shape`` (positions up to ``max_len``; ``extra`` config keys on top), seed 0."""
    dims = dict(hidden=shape.hidden, intermediate=shape.intermediate, layers=shape.layers, heads=shape.heads)
    return tiny_causal_lm(
        "qwen2",
        shape.vocab,
        **dims,
        kv_heads=shape.kv_heads,
        max_position_embeddings=max_len,
        tie_word_embeddings=tied,
        **extra,
    )


def save_char_model(directory: Path, shape: ModelShape, max_len: int) -> Path:
    """A random Qwen2 of ``shape`` with a character-level tokenizer (printable ASCII, one token per
    character: the digits and '.' are single tokens), saved as a Hugging Face directory."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + tuple(TOKEN_CHARS))}
    if len(vocab) != shape.vocab:
        raise ValueError(f"the character vocabulary has {len(vocab)} tokens, the shape says {shape.vocab}")
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")
    ids = dict(
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    qwen2_model(shape, max_len, shape.tied_embeddings, **ids).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def write_traces(path: Path, rows: int, chars: int) -> Path:
    """Alpaca rows whose answers are long arithmetic traces (numbers with points, ~45% digits),
    each longer than ``chars`` characters (the tokenizer drops the spaces and line breaks: ~0.78
    tokens per character), so that every example is cut to exactly max_length."""
    import random

    rng = random.Random(0)
    with path.open("w") as out:
        for i in range(rows):
            parts, size = [], 0
            while size < chars:
                a, b = rng.randint(1, 99999), rng.randint(1, 999)
                step = f"step {len(parts)}: {a} / {b} = {a / b:.4f}, so the total is {a + b}.\n"
                parts.append(step)
                size += len(step)
            out.write(json.dumps({"instruction": f"Trace {i}: divide and add.", "output": "".join(parts)}) + "\n")
    return path


def trainer_overrides(args: argparse.Namespace, seq_len: int, sp: int, run_dir: Path) -> list[str]:
    """The recipe keys of one (T, SP) run: one sequence of exactly ``seq_len`` tokens per step."""
    overrides = {
        "model": str(args.model_dir),
        "model.attn_implementation": "sdpa",
        "model.precision": "fp32",
        "model.gradient_checkpointing": str(args.gradient_checkpointing).lower(),
        "model.cache_dir": str(args.work / "cache"),
        "data": str(args.data),
        "data.max_length": seq_len,
        "data.eval_size": 0,
        "data.cache_dir": str(args.work / "cache" / "data"),
        "loss": "del",
        "loss.path": args.loss_path,
        "optimizer.lr": 1e-4,
        "optimizer.warmup_ratio": 0.0,
        "run.global_batch_size": 1,
        "run.micro_batch_size": 1,
        "run.max_steps": 1 + args.repeats,
        "run.report_to": "jsonl",
        "run.export": "false",
        "run.output_dir": str(run_dir),
        "run.seed": 0,
        "run.overwrite": "true",
    }
    if sp > 1:
        overrides["parallel.sp"] = sp
    return [f"{key}={value}" for key, value in overrides.items()]


def live_tensors() -> list:
    """Every tensor Python can reach now (weights, gradient and optimizer buffers, ...)."""
    import torch

    gc.collect()
    return [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]


def worker(argv: list[str]) -> None:
    """One rank of a (T, SP) run (under torchrun): set up the trainer, warm up, measure steps."""
    import torch.distributed as dist
    from bench_common import _rss_peak, track_rss_precisely
    from live_bytes import peak_live_bytes

    from del_core.training.config import load_train_config
    from del_core.training.trainer import Trainer

    out_file, repeats, overrides = Path(argv[0]), int(argv[1]), argv[2:]
    track_rss_precisely()
    trainer = Trainer(load_train_config(None, overrides))
    trainer.setup()
    try:
        trainer.train_step()  # the first step allocates gradient and optimizer buffers
        live, rss = [], []
        for _ in range(repeats):
            existing = live_tensors()
            peak = [0]

            def step(peak=peak) -> None:
                peak[0] = _rss_peak(trainer.train_step)

            live.append(peak_live_bytes(step, existing))
            rss.append(peak[0])
            del existing
        rank = dist.get_rank() if dist.is_initialized() else 0
        Path(f"{out_file}.rank{rank}").write_text(json.dumps({"live": live, "rss": rss}))
    finally:
        trainer.cleanup()
        if dist.is_initialized():
            dist.destroy_process_group()


def run_point(args: argparse.Namespace, seq_len: int, sp: int) -> Point:
    """Launch one (T, SP) run and collect every rank's measurements."""
    run_dir = args.work / f"run-T{seq_len}-sp{sp}"
    out_file = args.work / f"T{seq_len}-sp{sp}.json"
    command = torchrun_command(
        sp, __file__, "--worker", out_file, args.repeats, *trainer_overrides(args, seq_len, sp, run_dir)
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"T={seq_len} sp={sp} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    ranks = [json.loads(Path(f"{out_file}.rank{r}").read_text()) for r in range(sp)]
    return Point(seq_len, sp, [r["live"] for r in ranks], [r["rss"] for r in ranks])


def predicted(args: argparse.Namespace, seq_len: int, sp: int) -> int:
    train = TrainShape(
        seq_len=padded_length(seq_len, sp),  # the trainer pads each sequence to a multiple of sp
        sp=sp,
        world=sp,
        dtype_bytes=4,
        gradient_checkpointing=args.gradient_checkpointing,
        loss_path=args.loss_path,
    )
    return estimate(args.shape, train).activation_peak


def _summary(values: list[list[int]]) -> tuple[float, float, float]:
    flat = [v for rank in values for v in rank]
    return statistics.median(flat) / MB, min(flat) / MB, max(flat) / MB


def report(args: argparse.Namespace, points: list[Point]) -> str:
    """The markdown table of measured vs predicted, with ratios to SP = 1."""
    lines = [
        "| T | SP | tokens / rank | live MB (median, range) | peak RSS MB (median, range) | predicted MB "
        "| live / predicted | live vs SP=1 | RSS vs SP=1 | predicted vs SP=1 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {p.seq_len: p for p in points if p.sp == 1}
    for p in points:
        live, rss, pred = _summary(p.live_bytes), _summary(p.rss_bytes), predicted(args, p.seq_len, p.sp) / MB
        ref = base.get(p.seq_len)
        if ref is not None:
            ratios = (
                live[0] / _summary(ref.live_bytes)[0],
                rss[0] / _summary(ref.rss_bytes)[0],
                pred / (predicted(args, p.seq_len, 1) / MB),
            )
            ratio_text = " | ".join(f"{r:.3f}" for r in ratios)
        else:
            ratio_text = "- | - | -"
        lines.append(
            f"| {p.seq_len} | {p.sp} | {p.seq_len // p.sp} | {live[0]:.1f} ({live[1]:.1f}-{live[2]:.1f}) "
            f"| {rss[0]:.1f} ({rss[1]:.1f}-{rss[2]:.1f}) | {pred:.1f} | {live[0] / pred:.3f} | {ratio_text} |"
        )
    return "\n".join(lines)


def measure_one_process(shape: ModelShape, seq_len: int, dtype, checkpointing: bool, path: str) -> int:
    """Exact peak bytes (live_bytes.py) of one forward + DEL loss + backward of a random HF Qwen2 of
    ``shape`` (SDPA) on one sequence, after a warm-up call; weights and their gradients, allocated
    before, are not counted."""
    import random

    import torch
    from bench_common import QWEN2_VOCAB, make_labels
    from live_bytes import peak_live_bytes

    from del_core import build_loss

    model = qwen2_model(shape, seq_len, tied=False, use_cache=False, attn_implementation="sdpa").to(dtype).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids, positions = torch.randint(30, shape.vocab, (1, seq_len)), torch.arange(seq_len)[None]
    labels = make_labels(seq_len, shape.vocab, QWEN2_VOCAB, random.Random(0)).view(-1)
    loss = build_loss("del", QWEN2_VOCAB)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    def step() -> None:
        # No reference to the logits or hidden states outlives the forward, as in the trainer's objective.
        if path == "logits":
            out = loss(model(input_ids=ids, position_ids=positions).logits[0], labels)
        else:
            body = model.model(input_ids=ids, position_ids=positions)
            out = loss.from_hidden(body.last_hidden_state[0], model.lm_head.weight, labels)
            del body
        out.loss.backward()

    step()
    return peak_live_bytes(step, [*model.parameters(), *(p.grad for p in model.parameters()), ids, positions, labels])


def check_model(lengths: list[int]) -> str:
    """The model's activation_peak against :func:`measure_one_process`, fp32 and bf16, with and
    without checkpointing, logits and chunked paths, at three shapes."""
    import itertools

    import torch

    lines = [
        "| hidden, intermediate, layers, heads, kv | V | T | dtype | checkpointing | loss path "
        "| measured MB | predicted MB | measured / predicted |",
        "|:---|---:|---:|:---|:---|:---|---:|---:|---:|",
    ]
    shapes = (
        ModelShape(128, 512, 3, 4, 2, 4096, qkv_bias=True),
        ModelShape(192, 384, 3, 6, 3, 4096, qkv_bias=True),
        ModelShape(128, 512, 2, 4, 4, 512, qkv_bias=True),
    )
    print("\n".join(lines), flush=True)
    settings = itertools.product(shapes, lengths, (torch.float32, torch.bfloat16), (False, True), ("logits", "chunked"))
    for shape, seq_len, dtype, checkpointing, path in settings:
        measured = measure_one_process(shape, seq_len, dtype, checkpointing, path)
        train = TrainShape(seq_len, dtype_bytes=dtype.itemsize, gradient_checkpointing=checkpointing, loss_path=path)
        predicted_bytes = estimate(shape, train).activation_peak
        dims = f"{shape.hidden}, {shape.intermediate}, {shape.layers}, {shape.heads}, {shape.kv_heads}"
        lines.append(
            f"| {dims} | {shape.vocab} | {seq_len} | {str(dtype).removeprefix('torch.')} "
            f"| {'on' if checkpointing else 'off'} | {path} | {measured / MB:.2f} | {predicted_bytes / MB:.2f} "
            f"| {measured / predicted_bytes:.3f} |"
        )
        print(lines[-1], flush=True)
    return "\n".join(lines)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="2048,4096,8192", help="sequence lengths T (comma-separated)")
    parser.add_argument("--sp", default="1,2,4", help="sequence-parallel degrees (comma-separated)")
    parser.add_argument("--repeats", type=int, default=2, help="measured steps per run (after one warm-up step)")
    parser.add_argument("--quick", action="store_true", help="T = 1024 (or --lengths), SP = 1, 2; 2 layers; 1 repeat")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--loss-path", choices=("logits", "chunked"), default="chunked")
    parser.add_argument("--check-model", action="store_true", help="check the model's terms in one process")
    parser.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per (T, SP) run")
    args = parser.parse_args(argv)
    args.shape = BENCH_MODEL
    if args.quick:
        args.repeats, args.shape = 1, QUICK_MODEL
        args.lengths = "1024" if args.lengths == "2048,4096,8192" else args.lengths
        args.sp = "1,2" if args.sp == "1,2,4" else args.sp
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.sp = [int(x) for x in args.sp.split(",")]
    return args


def main(argv: Optional[list[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        worker(argv[1:])
        return
    args = parse_args(argv)
    if args.check_model:
        check_model([512, 1024])
        return
    with tempfile.TemporaryDirectory(prefix="sp-memory-") as tmp:
        args.work = args.work or Path(tmp)
        args.work.mkdir(parents=True, exist_ok=True)
        args.model_dir = save_char_model(args.work / "model", args.shape, max(args.lengths))
        args.data = write_traces(args.work / "traces.jsonl", rows=4 * (1 + args.repeats), chars=2 * max(args.lengths))
        points = []
        for seq_len in args.lengths:
            for sp in args.sp:
                points.append(run_point(args, seq_len, sp))
                print(f"T={seq_len} sp={sp}: live {_summary(points[-1].live_bytes)[0]:.1f} MB", flush=True)
        print(report(args, points))
        if args.json:
            args.json.write_text(json.dumps([asdict(p) for p in points], indent=1))


if __name__ == "__main__":
    main()
