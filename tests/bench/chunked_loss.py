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

from del_core import build_loss


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


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--tokens", type=int_list, default=[2048, 4096, 8192, 16384] if cuda else [2048, 4096, 8192])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--chunk-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5 if cuda else 1)
    parser.add_argument("--warmup", type=int, default=2 if cuda else 0)
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16" if cuda else "float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.device = torch.device(args.device)
    args.dtype = getattr(torch, args.dtype)
    return args


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
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
