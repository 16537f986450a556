"""A checkpoint's save time per GB, and what it predicts for a model the memory model knows: the
figure that sizes ``#SBATCH --signal=B:USR1@N`` (docs/cluster.md).

    python tests/bench/checkpoint_save.py                                  # ~2 GB checkpoints, ~1 min on CPU
    python tests/bench/checkpoint_save.py --hidden 512 --layers 4          # smaller
    python tests/bench/checkpoint_save.py --model Qwen/Qwen2.5-7B --world 16

Trains a random Qwen2 (``--hidden``, ``--layers``, intermediate 4 x hidden, a character tokenizer)
for ``--steps`` steps with ``recipes/train.py`` in one process (fp32, ZeRO-3, torch AdamW, a
checkpoint after every step) and reads each ``[checkpoint] step N saved to DIR in S s`` line: the
whole save as a run does it (DeepSpeed's shards, the RNG state, the CRC-32 manifest, the marker).
Size: the bytes of the checkpoint folder. The last lines give the median seconds per GB and, from
:mod:`del_core.memory_model`, one rank's checkpoint of ``--model`` on ``--world`` GPUs
(bf16 weights + fp32 master weights and AdamW moments: the memory model's ``weights`` +
``optimizer_states`` under ZeRO-3) with its save time at that rate on this disk.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from sequence_parallel_memory import save_char_model  # noqa: E402

from del_core.memory_model import ModelShape, TrainShape, estimate, model_shape_of  # noqa: E402

GB = 1e9
SAVED = re.compile(r"\[checkpoint\] step (\d+) saved to (\S+) in ([\d.]+) s")


def measure(args: argparse.Namespace, work: Path) -> list[tuple[float, float]]:
    """(GB, seconds) of each checkpoint the run wrote."""
    shape = ModelShape(
        hidden=args.hidden, intermediate=4 * args.hidden, layers=args.layers, heads=8, kv_heads=2, vocab=100,
        qkv_bias=True, tied_embeddings=True,
    )  # fmt: skip
    model = save_char_model(work / "model", shape, max_len=512)
    overrides = {
        "model": model, "data": "synthetic:8", "data.eval_size": 0, "data.max_length": 256, "loss": "mle",
        "run.global_batch_size": 1, "run.micro_batch_size": 1, "run.max_steps": args.steps, "run.save_every": 1,
        "run.save_total_limit": args.steps, "run.export": "false", "run.report_to": "jsonl",
        "model.gradient_checkpointing": "false", "model.cache_dir": work / "cache", "run.output_dir": work / "run",
    }  # fmt: skip
    command = [sys.executable, str(REPO / "recipes" / "train.py"), *(f"{k}={v}" for k, v in overrides.items())]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"train.py exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    saves = []
    for step, folder, seconds in SAVED.findall(proc.stdout):
        size = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
        saves.append((size / GB, float(seconds)))
        print(f"step {step}: {size / GB:.2f} GB in {float(seconds):.1f} s = {float(seconds) / (size / GB):.2f} s/GB")
    return saves


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default="Qwen/Qwen2.5-7B")
    parser.add_argument("--world", type=int, default=16)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="checkpoint-save-") as work:
        saves = measure(args, Path(work))
    rate = statistics.median(seconds / size for size, seconds in saves)
    print(f"median: {rate:.2f} s/GB ({1 / rate:.2f} GB/s) on this disk, one process")
    target = model_shape_of(args.model)
    train = TrainShape(seq_len=2048, micro_batch=1, sp=1, world=args.world, dtype_bytes=2, zero_stage=3)
    parts = estimate(target, train)
    per_rank = (parts.weights + parts.optimizer_states) / GB
    print(
        f"{args.model} ({target.parameters / 1e9:.2f}B) on {args.world} GPUs, ZeRO-3, bf16: {per_rank:.2f} GB of "
        f"checkpoint per rank ({per_rank * args.world:.0f} GB in all), {per_rank * rate:.0f} s per rank at this rate"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
