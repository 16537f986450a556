"""Overhead of each numeric loss over plain cross-entropy: forward+backward time and peak memory.

Run (not part of CI)::

    python tests/bench/loss_overhead.py                      # full sweep, both vocabularies
    python tests/bench/loss_overhead.py --vocab qwen2 --vocab-sizes 32000 --tokens 1024 --repeats 2 --warmup 1
    python tests/bench/loss_overhead.py --vocab llama3 --llama3-tokenizer ../shared/vocab/ggml-vocab-llama-bpe.gguf
    python tests/bench/loss_overhead.py --losses del --json overhead.json

Target (project issue): DEL must cost at most 1.05x the time of CE (``time_ratio <= 1.05`` on the
``del`` rows, measured on the GPU at realistic sizes).

Number vocabularies (``--vocab``, default both; ``bench_common.py``):

* ``qwen2``: Qwen2's ids, one digit per token (C = 10 number tokens); default V = 151,936 and
  32,000;
* ``llama3``: Llama-3's 1,110 number tokens of widths 1..3 (C = 1,110; the losses of
  docs/number_tokens.md); default V = 128,256. The width-2/3 ids come from the tokenizer given by
  ``--llama3-tokenizer`` (a ``.gguf`` file or a Hugging Face directory; the vocabulary column then
  reads ``llama3``); without it from a synthetic stand-in (``llama3-synthetic``: Llama-3's ids of
  '0'..'9' and '.', and 1,100 distinct made-up ids for the rest; the real ids follow no rule).

``--vocab-sizes`` replaces the default V of every chosen vocabulary. Expected: the auxiliary
term costs O(N x C), the CE part O(N x V), so on Llama-3's vocabulary too del/mle is close to 1.

For every vocabulary, vocabulary size V and token count N the script builds ONE batch, reused by
all losses:

* labels [1, N]: random ordinary token ids, 20% of the positions number tokens laid out as numbers
  of 1..6 digits (some with a point inside, so multi-token spans with integer and fractional
  parts exist) separated by other tokens, and about 5% ignored (-100) positions. On ``llama3``
  each digit run is split as Llama-3 splits it, left to right in tokens of 3 digits and a last
  shorter one (widths 3, 3, ..., rest: ``1234.56`` -> ``123 4 . 56``);
* logits [1, N, V]: standard normal, ``requires_grad``, in ``--dtype``.

It then measures the baseline ``CE`` (``F.cross_entropy(logits.float().view(-1, V), ...)`` and
``backward()``) and ``build_loss(name, vocab)(logits, labels).loss.backward()`` for each loss
(every loss already contains CE, so its row is "CE + the loss's extra term"). ``logits.grad`` is
reset before every call. EMO gets a random [V, --emo-hidden] cost embedding, built with the loss
and held before the measured call (so it is not counted in the peak).

Time: median and min-max over ``--repeats`` rounds after ``--warmup`` unmeasured rounds, wall
clock, with ``torch.cuda.synchronize()`` before and after each call on CUDA. A round calls every
loss once in turn (interleaved), so drifts of a shared machine fall on all losses alike; the
ratios are paired: per round, a loss's call over CE's (or mle's) call of the same round, then the
median over rounds, and for time_vs_mle also the min-max over rounds (a ratio whose min-max
straddles 1 is not a measured cost).

Peak memory: one extra call after the timed ones, measured as in ``bench_common.py`` (CUDA
allocator peak, or sampled RSS on CPU) above what is held before it (logits, labels, the loss
module's buffers; ``logits.grad`` is None then, so the gradient counts in the peak).

Output: a progress line per measurement on stderr, then a markdown table (vocab, C, V, N, loss,
time_ms with its min-max, time_ratio and mem_ratio relative to CE at the same vocabulary, V and
N, time_vs_mle relative to the ``mle`` row, i.e. the cost of the auxiliary term alone, with its
min-max, peak_MiB) on stdout; ``--json PATH`` also writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from bench_common import (
    IGNORE_INDEX,
    LLAMA3_VOCAB_SIZE,
    QWEN2_VOCAB,
    QWEN2_VOCAB_SIZE,
    Step,
    int_list,
    llama3_vocab,
    make_labels,
    peak_mib,
    release_memory,
    synchronize,
)

from del_core import LOSS_NAMES, DigitVocab
from del_core.losses import build_loss_for_model

BASELINE = "CE"
# --vocab choices: the default vocabulary sizes of each
VOCABS = {"qwen2": [QWEN2_VOCAB_SIZE, 32000], "llama3": [LLAMA3_VOCAB_SIZE]}


@dataclass
class Row:
    """One measurement: a loss at one (vocabulary, V, N)."""

    V: int
    N: int
    loss: str
    time_ms: float  # median over the rounds
    peak_MiB: float
    time_min_ms: float = math.nan
    time_max_ms: float = math.nan
    time_ratio: float = math.nan  # median over rounds of (this call / CE's call in the same round)
    mem_ratio: float = math.nan
    time_vs_mle: float = math.nan  # median over rounds of (this call / mle's call in the same round)
    vs_mle_min: float = math.nan  # the spread of that paired ratio over the rounds
    vs_mle_max: float = math.nan
    device: str = ""
    dtype: str = ""
    vocab: str = ""  # the number vocabulary's name (qwen2, llama3, llama3-synthetic)
    C: int = 0  # its number tokens


# --- the batch ---------------------------------------------------------------------------------
def make_logits(n_tokens: int, vocab_size: int, dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    """Standard-normal logits [1, N, V] that require grad."""
    generator = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(1, n_tokens, vocab_size, generator=generator, device=device, dtype=dtype)
    return logits.requires_grad_(True)


# --- the measured steps ------------------------------------------------------------------------
def ce_step(logits: torch.Tensor, labels: torch.Tensor) -> Step:
    """The baseline: fp32 cross-entropy over all positions, then backward."""
    vocab_size = logits.shape[-1]

    def step() -> None:
        loss = F.cross_entropy(logits.float().view(-1, vocab_size), labels.view(-1), ignore_index=IGNORE_INDEX)
        loss.backward()

    return step


def loss_step(loss_fn: torch.nn.Module, logits: torch.Tensor, labels: torch.Tensor) -> Step:
    """``loss_fn(logits, labels).loss`` then backward."""

    def step() -> None:
        loss_fn(logits, labels).loss.backward()

    return step


def build_named_loss(
    name: str, vocab_size: int, args: argparse.Namespace, vocab: DigitVocab = QWEN2_VOCAB
) -> torch.nn.Module:
    """``build_loss(name, vocab)``; a random [V, H] LM-head weight for a loss that needs one (EMO)."""

    def head_weight() -> torch.Tensor:
        generator = torch.Generator(device=args.device).manual_seed(args.seed + 1)
        return torch.randn(vocab_size, args.emo_hidden, generator=generator, device=args.device)

    return build_loss_for_model(name, vocab, head_weight=head_weight, validate=not args.no_validate).to(args.device)


# The losses that score a number one digit token at a time and refuse multi-digit vocabularies.
SINGLE_DIGIT_ONLY = ("number_level", "ntil")


# --- timing and memory -------------------------------------------------------------------------
def run_once(step: Step, logits: torch.Tensor) -> None:
    """One call with a fresh gradient."""
    logits.grad = None
    step()


def interleaved_times_ms(
    steps: dict[str, Step], logits: torch.Tensor, repeats: int, warmup: int
) -> dict[str, list[float]]:
    """Wall time (ms) of each step in each of ``repeats`` rounds, after ``warmup`` rounds.

    Each round runs every step once, in turn, so slow drifts of the machine (other processes,
    allocator state, thermal limits) fall on all steps alike instead of on whichever ran last, and
    the ratio of two steps in one round is a paired measurement.
    """
    device = logits.device
    for _ in range(warmup):
        for step in steps.values():
            run_once(step, logits)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            logits.grad = None
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def measure_peak(name: str, step: Step, logits: torch.Tensor) -> float:
    """Peak memory (MiB) of one call; NaN when it runs out of device memory."""
    logits.grad = None
    try:
        return peak_mib(step, logits.device)
    except torch.cuda.OutOfMemoryError:
        return math.nan
    finally:
        logits.grad = None


# --- the sweep ---------------------------------------------------------------------------------
def bench_config(
    vocab_size: int, n_tokens: int, args: argparse.Namespace, vocab: DigitVocab = QWEN2_VOCAB
) -> list[Row]:
    """All rows at one (vocabulary, V, N): CE first, then each loss; ratios relative to CE."""
    labels = make_labels(n_tokens, vocab_size, vocab, random.Random(args.seed)).to(args.device)
    logits = make_logits(n_tokens, vocab_size, args.dtype, args.device, args.seed)
    steps: dict[str, Step] = {BASELINE: ce_step(logits, labels)}
    for name in args.losses:
        if vocab.multi_digit and name in SINGLE_DIGIT_ONLY:
            print(f"{vocab.name:<16} {name}: refused on multi-digit vocabularies, no row", file=sys.stderr)
            continue
        steps[name] = loss_step(build_named_loss(name, vocab_size, args, vocab), logits, labels)
    try:
        times = interleaved_times_ms(steps, logits, args.repeats, args.warmup)
    except torch.cuda.OutOfMemoryError:
        times = {name: [math.nan] for name in steps}
    dtype = str(logits.dtype).replace("torch.", "")
    rows = []
    for name, step in steps.items():
        peak = measure_peak(name, step, logits)
        median = statistics.median(times[name])
        row = Row(vocab_size, n_tokens, name, median, peak, min(times[name]), max(times[name]))
        row.device, row.dtype, row.vocab, row.C = str(logits.device), dtype, vocab.name, len(vocab.number_ids)
        rows.append(row)
        print(
            f"{vocab.name:<16} V={vocab_size:>6} N={n_tokens:>5} {name:<8} {median:10.2f} ms {peak:10.1f} MiB",
            file=sys.stderr,
            flush=True,
        )
    add_ratios(rows, times)
    del steps, logits, labels
    release_memory(args.device)
    return rows


def add_ratios(rows: list[Row], times: dict[str, list[float]]) -> None:
    """Fill time_ratio (paired with CE, the first row) and mem_ratio, and time_vs_mle with its
    min-max over rounds (paired with ``mle``: the same fused CE without an auxiliary term, so the
    ratio is the cost of the term alone)."""
    base = rows[0]
    for row in rows:
        row.time_ratio = statistics.median(_paired(times[row.loss], times[base.loss]))
        row.mem_ratio = _ratio(row.peak_MiB, base.peak_MiB)
        if "mle" in times:
            paired = _paired(times[row.loss], times["mle"])
            row.time_vs_mle, row.vs_mle_min, row.vs_mle_max = statistics.median(paired), min(paired), max(paired)


def _paired(values: list[float], bases: list[float]) -> list[float]:
    """Per-round ratios ``values[i] / bases[i]``."""
    return [_ratio(value, base) for value, base in zip(values, bases)]


def _ratio(value: float, base: float) -> float:
    return value / base if base > 0 else math.nan


def markdown_table(rows: list[Row]) -> str:
    """The rows as a markdown table: medians, with the min-max over rounds in brackets."""
    lines = [
        "| vocab | C | V | N | loss | time_ms [min-max] | time_ratio | time_vs_mle [min-max] | peak_MiB | mem_ratio |",
        "|:---|---:|---:|---:|:---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.vocab} | {r.C} | {r.V} | {r.N} | {r.loss} "
            f"| {r.time_ms:.1f} [{r.time_min_ms:.1f}-{r.time_max_ms:.1f}] "
            f"| {r.time_ratio:.3f} | {r.time_vs_mle:.3f} [{r.vs_mle_min:.3f}-{r.vs_mle_max:.3f}] "
            f"| {r.peak_MiB:.1f} | {r.mem_ratio:.3f} |"
        )
    return "\n".join(lines)


def json_row(row: Row) -> dict:
    """The row as a dict, NaN (out of memory, zero baseline) written as null."""
    return {
        key: None if isinstance(value, float) and math.isnan(value) else value for key, value in asdict(row).items()
    }


# --- command line ------------------------------------------------------------------------------
def _name_list(text: str) -> list[str]:
    names = [part.lower().replace("-", "_") for part in text.replace(",", " ").split()]
    unknown = [name for name in names if name not in LOSS_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown loss(es) {unknown}; choose from {', '.join(LOSS_NAMES)}")
    return names


def _vocab_list(text: str) -> list[str]:
    names = [part.lower().replace("-", "") for part in text.replace(",", " ").split()]
    unknown = [name for name in names if name not in VOCABS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown vocabulary(ies) {unknown}; choose from {', '.join(VOCABS)}")
    return list(dict.fromkeys(names))


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--vocab",
        type=_vocab_list,
        default=list(VOCABS),
        help="comma-separated number vocabularies: qwen2 (10 single-digit tokens), llama3 (1,110 tokens of "
        "widths 1..3) (default: qwen2,llama3)",
    )
    parser.add_argument(
        "--llama3-tokenizer",
        metavar="PATH",
        help="Llama-3 tokenizer (.gguf or Hugging Face directory) for the real number-token ids of the llama3 "
        "rows (default: a synthetic stand-in of 1,110 distinct ids)",
    )
    parser.add_argument(
        "--vocab-sizes",
        type=int_list,
        default=None,
        help="comma-separated V for every chosen vocabulary (default: 151936,32000 for qwen2, 128256 for llama3)",
    )
    parser.add_argument(
        "--tokens",
        type=int_list,
        default=[1024, 2048, 4096, 8192],
        help="comma-separated N (default: 1024,2048,4096,8192)",
    )
    parser.add_argument(
        "--losses", type=_name_list, default=list(LOSS_NAMES), help=f"comma-separated (default: {','.join(LOSS_NAMES)})"
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per measurement (median reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="logits dtype (default: bfloat16 on cuda, float32 on cpu)",
    )
    parser.add_argument("--emo-hidden", type=int, default=1536, help="hidden size H of EMO's [V, H] cost embedding")
    parser.add_argument(
        "--no-validate", action="store_true", help="build the losses with validate=False (no host syncs)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON to PATH")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")
    args.device = torch.device(args.device)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.type == "cuda" else "float32"
    args.dtype = getattr(torch, args.dtype)
    return args


def sweep(args: argparse.Namespace) -> list[tuple[DigitVocab, int]]:
    """The (vocabulary, V) pairs of the run, in order; exits naming a V too small for a
    vocabulary's ids (Llama-3's reach about 28,400) before anything is measured."""
    pairs = []
    for name in args.vocab:
        vocab = llama3_vocab(args.llama3_tokenizer) if name == "llama3" else QWEN2_VOCAB
        for vocab_size in args.vocab_sizes or VOCABS[name]:
            try:
                vocab.check_fits(vocab_size)
            except ValueError as error:
                raise SystemExit(f"--vocab {name} at V={vocab_size}: {error}") from None
            pairs.append((vocab, vocab_size))
    return pairs


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    print(
        f"device={args.device} dtype={args.dtype} repeats={args.repeats} warmup={args.warmup}",
        file=sys.stderr,
        flush=True,
    )
    rows: list[Row] = []
    pairs = sweep(args)
    for vocab in dict.fromkeys(vocab for vocab, _ in pairs):
        print(f"{vocab.name}: {vocab.describe()}", file=sys.stderr, flush=True)
    for vocab, vocab_size in pairs:
        for n_tokens in args.tokens:
            rows.extend(bench_config(vocab_size, n_tokens, args, vocab))
    print(markdown_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([json_row(row) for row in rows], handle, indent=2)


if __name__ == "__main__":
    main()
