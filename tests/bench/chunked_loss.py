"""Naive (full fp32 logits) vs chunked (from hidden states) loss: time and peak memory ratios.

Run (not part of CI)::

    python tests/bench/chunked_loss.py                                  # GPU: N = 2k..16k
    python tests/bench/chunked_loss.py --tokens 2048,8192 --repeats 1   # CPU: one call each

For each N: hidden [N, H] and the LM-head weight [V, H] (H = 1536, V = 151,936: Qwen2.5-1.5B),
labels with 20% digits (``bench_common.make_labels``). Four measured steps, forward + backward to
both the hidden states and the weight:

* ``naive CE``:      ``F.cross_entropy((hidden @ W.T).float(), labels)``
* ``naive CE+DEL``:  ``build_loss("del")((hidden @ W.T).float(), labels)``
* ``chunked CE``:    ``build_loss("mle").from_hidden(hidden, W, labels, chunk_size=C)``
* ``chunked CE+DEL``: ``build_loss("del").from_hidden(hidden, W, labels, chunk_size=C)``

Time is the median of ``--repeats`` calls after ``--warmup``; peak memory is measured during the
timed calls (CUDA allocator peak, or sampled RSS on CPU; see ``bench_common.py``) above what is
held before (hidden, weight, labels). Targets (project issue): at N = 8192, chunked CE+DEL uses
<= 0.2x the memory of naive CE+DEL and <= 1.1x its time. The last line reads
``RESULT N=8192 memory_ratio=<x> time_ratio=<y>`` (chunked over naive, CE+DEL).

``--memory-model`` instead checks the chunked path's peak-memory formula (:func:`predicted_peak_bytes`)
against an exact measurement (``live_bytes.py``: the bytes of every tensor the step allocates, forward
and backward) at reduced shapes, then prints the formula at the Qwen2.5-7B head (N = 6000,
V = 152,064, H = 3584, bf16; the issue's target is <= 1.5 GB) for several chunk sizes::

    python tests/bench/chunked_loss.py --memory-model
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Optional

import torch
import torch.nn.functional as F
from bench_common import (
    IGNORE_INDEX,
    QWEN2_VOCAB,
    Step,
    int_list,
    make_labels,
    peak_mib,
    release_memory,
    synchronize,
    track_rss_precisely,
)
from live_bytes import peak_live_bytes

from del_core import build_loss
from del_core.memory_model import LOSS_PER_TOKEN_BYTES, chunked_loss_peak_bytes

# Qwen2.5-7B's LM head and a 6,000-token micro-batch: the shape the memory target is stated at.
SHAPE_7B = {"n": 6000, "v": 152_064, "h": 3584}
# Per-token statistics the chunked path keeps (lse, CE, digit logits, their gradients): measured
# as ~110 bytes per token at the reduced shapes; small next to the terms below.
PER_TOKEN_BYTES = LOSS_PER_TOKEN_BYTES


def make_inputs(n_tokens: int, args: argparse.Namespace):
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    hidden = torch.randn(n_tokens, args.hidden, generator=g, device=args.device, dtype=args.dtype).requires_grad_(True)
    weight = (
        0.02 * torch.randn(args.vocab, args.hidden, generator=g, device=args.device, dtype=args.dtype)
    ).requires_grad_(True)
    labels = make_labels(n_tokens, args.vocab, QWEN2_VOCAB, random.Random(args.seed)).view(-1).to(args.device)
    return hidden, weight, labels


def steps(hidden, weight, labels, chunk_size: int) -> dict[str, Step]:
    mle, dl = build_loss("mle", QWEN2_VOCAB, validate=False), build_loss("del", QWEN2_VOCAB, validate=False)

    def naive_ce():
        F.cross_entropy((hidden @ weight.T).float(), labels, ignore_index=IGNORE_INDEX).backward()

    def naive_del():
        dl((hidden @ weight.T).float(), labels).loss.backward()

    def chunked_ce():
        mle.from_hidden(hidden, weight, labels, chunk_size=chunk_size).loss.backward()

    def chunked_del():
        dl.from_hidden(hidden, weight, labels, chunk_size=chunk_size).loss.backward()

    return {"naive CE": naive_ce, "naive CE+DEL": naive_del, "chunked CE": chunked_ce, "chunked CE+DEL": chunked_del}


def measure(step: Step, tensors, device, repeats: int, warmup: int) -> tuple[float, float]:
    """(median ms, peak MiB) over the timed calls."""

    def call():
        for t in tensors:
            t.grad = None
        step()

    for _ in range(warmup):
        call()
    times, peaks = [], []
    for _ in range(repeats):
        for t in tensors:
            t.grad = None
        synchronize(device)
        start = time.perf_counter()
        peaks.append(peak_mib(step, device))
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    for t in tensors:
        t.grad = None
    return statistics.median(times), max(peaks)


def predicted_peak_bytes(n: int, v: int, h: int, chunk: int, weight_bytes: int) -> int:
    """Peak extra memory of ``from_hidden`` + backward for a plain-CE loss (MLE, DEL, NTL, DIST2):
    the memory model's formula (:func:`del_core.memory_model.chunked_loss_peak_bytes`),
    which this script checks against measurements."""
    return chunked_loss_peak_bytes(n, v, h, chunk, weight_bytes)


def predicted_peak_bytes_fp32_accumulator(n: int, v: int, h: int, chunk: int, weight_bytes: int) -> int:
    """The same for the previous design (fp32 [V, H] weight-gradient accumulator plus a per-chunk
    [V, H] product in the weight's dtype), for the before/after comparison."""
    transient = chunk * v * (4 + weight_bytes) if weight_bytes != 4 else chunk * v * 4
    per_chunk_product = v * h * weight_bytes if weight_bytes != 4 else 0
    return v * h * 4 + n * h * weight_bytes + max(transient, per_chunk_product) + n * PER_TOKEN_BYTES


def measured_peak_bytes(n: int, v: int, h: int, chunk: int, dtype: torch.dtype, loss_name: str) -> int:
    """Exact peak bytes allocated by one chunked forward + backward (after one warm-up call)."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, h, generator=g, dtype=dtype).requires_grad_(True)
    weight = (0.02 * torch.randn(v, h, generator=g, dtype=dtype)).requires_grad_(True)
    labels = make_labels(n, v, QWEN2_VOCAB, random.Random(0)).view(-1)
    loss = build_loss(loss_name, QWEN2_VOCAB)

    def step() -> None:
        loss.from_hidden(hidden, weight, labels, chunk_size=chunk).loss.backward()

    step()
    hidden.grad = weight.grad = None
    return peak_live_bytes(step, (hidden, weight))


def memory_model_report() -> None:
    """The formula against exact measurements at reduced shapes, then at the 7B shape."""
    print("| dtype | N | V | H | chunk | loss | measured MB | predicted MB | measured / predicted |")
    print("|:---|---:|---:|---:|---:|:---|---:|---:|---:|")
    for dtype in (torch.bfloat16, torch.float32):
        for n, v, h, chunk in ((1024, 16384, 256, 128), (2048, 16384, 512, 256), (1024, 32768, 128, 64)):
            for name in ("del", "mle"):
                measured = measured_peak_bytes(n, v, h, chunk, dtype, name)
                predicted = predicted_peak_bytes(n, v, h, chunk, dtype.itemsize)
                print(
                    f"| {str(dtype).removeprefix('torch.')} | {n} | {v} | {h} | {chunk} | {name} | "
                    f"{measured / 1e6:.2f} | {predicted / 1e6:.2f} | {measured / predicted:.3f} |"
                )
    print()
    print("Predicted at the Qwen2.5-7B head (N = 6000, V = 152,064, H = 3584, bf16):")
    print()
    print("| chunk | this design GB | fp32-accumulator design GB |")
    print("|---:|---:|---:|")
    for chunk in (128, 256, 512, 1024):
        now = predicted_peak_bytes(**SHAPE_7B, chunk=chunk, weight_bytes=2)
        before = predicted_peak_bytes_fp32_accumulator(**SHAPE_7B, chunk=chunk, weight_bytes=2)
        print(f"| {chunk} | {now / 1e9:.3f} | {before / 1e9:.3f} |")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--tokens", type=int_list, default=[2048, 4096, 8192, 16384] if cuda else [2048, 4096, 8192])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5 if cuda else 1)
    parser.add_argument("--warmup", type=int, default=2 if cuda else 0)
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16" if cuda else "float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--memory-model", action="store_true", help="check the peak-memory formula, print it at the 7B shape"
    )
    args = parser.parse_args(argv)
    args.device = torch.device(args.device)
    args.dtype = getattr(torch, args.dtype)
    return args


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    if args.memory_model:
        memory_model_report()
        return
    if args.device.type == "cpu":
        track_rss_precisely()
    print(
        f"device={args.device} dtype={args.dtype} V={args.vocab} H={args.hidden} chunk={args.chunk_size}",
        file=sys.stderr,
    )
    rows = []
    for n in args.tokens:
        hidden, weight, labels = make_inputs(n, args)
        for name, step in steps(hidden, weight, labels, args.chunk_size).items():
            ms, mib = measure(step, (hidden, weight), args.device, args.repeats, args.warmup)
            rows.append((n, name, ms, mib))
            print(f"N={n:>6} {name:<15} {ms:10.1f} ms {mib:10.1f} MiB", file=sys.stderr, flush=True)
        del hidden, weight, labels
        release_memory(args.device)
    print("| N | step | time_ms | peak_MiB | time vs naive | memory vs naive |")
    print("|---:|:---|---:|---:|---:|---:|")
    by_key = {(n, name): (ms, mib) for n, name, ms, mib in rows}
    for n, name, ms, mib in rows:
        naive = by_key[(n, name.replace("chunked", "naive"))]
        print(f"| {n} | {name} | {ms:.1f} | {mib:.1f} | {ms / naive[0]:.3f} | {mib / naive[1]:.3f} |")
    target = 8192 if (8192, "chunked CE+DEL") in by_key else max(n for n, *_ in rows)
    chunked, naive = by_key[(target, "chunked CE+DEL")], by_key[(target, "naive CE+DEL")]
    print(f"RESULT N={target} memory_ratio={chunked[1] / naive[1]:.3f} time_ratio={chunked[0] / naive[0]:.3f}")


if __name__ == "__main__":
    main()
