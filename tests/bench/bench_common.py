"""Helpers shared by the benchmark scripts: synthetic labels with numbers, device sync, peak memory.

Peak memory of one call, as the increase above what is held just before it:

* CUDA: ``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()``, minus
  ``memory_allocated()`` before the call (tensor memory; allocator cache not counted).
* CPU: a background thread samples the process RSS every 1 ms during the call; peaks shorter than
  that can be missed. glibc keeps freed large buffers in its heap once they have been freed a few
  times, so a chunked computation can look as large as the biggest buffer it ever freed;
  :func:`track_rss_precisely` makes every allocation over 64 KiB its own mapping, returned to the
  system when freed. It also makes every such allocation fault its pages in anew, which slows
  CPU timings: scripts whose point is memory call it, timing-first scripts do not.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import random
import threading
from collections.abc import Callable

import psutil
import torch

from del_core import DigitVocab

M_MMAP_THRESHOLD = -3


def track_rss_precisely() -> None:
    """Serve allocations over 64 KiB by their own mappings, returned to the system when freed."""
    # Not glibc: the call fails and RSS-based CPU peaks may overstate chunked computations.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 64 * 1024)


Step = Callable[[], None]
QWEN2_VOCAB = DigitVocab(digit_ids=tuple(range(15, 25)), point_id=13, name="qwen2")
IGNORE_INDEX = -100
DIGIT_FRACTION = 0.20
IGNORE_FRACTION = 0.05
POINT_PROBABILITY = 0.25  # chance that a number of >= 2 digits carries a point
MAX_NUMBER_DIGITS = 6
MIB = 2**20


def make_labels(n_tokens: int, vocab_size: int, vocab: DigitVocab, rng: random.Random) -> torch.Tensor:
    """int64 labels [1, N]: random ordinary tokens, ~20% digits in numbers, ~5% ignored."""
    special = set(vocab.digit_ids) | {vocab.point_id}
    labels = [_ordinary_token(vocab_size, special, rng) for _ in range(n_tokens)]
    in_number = [False] * n_tokens
    _place_numbers(labels, in_number, vocab, rng)
    free = [i for i in range(n_tokens) if not in_number[i]]
    for i in rng.sample(free, min(len(free), round(IGNORE_FRACTION * n_tokens))):
        labels[i] = IGNORE_INDEX
    return torch.tensor(labels, dtype=torch.long).view(1, n_tokens)


def _ordinary_token(vocab_size: int, special: set[int], rng: random.Random) -> int:
    """A random token id that is neither a digit nor the point."""
    while True:
        token = rng.randrange(vocab_size)
        if token not in special:
            return token


def _place_numbers(labels: list[int], in_number: list[bool], vocab: DigitVocab, rng: random.Random) -> None:
    """Write numbers into ``labels`` at random free places until 20% of the positions are digits.

    Numbers never touch each other (one free position on each side), so each is its own span.
    """
    n_tokens = len(labels)
    remaining = round(DIGIT_FRACTION * n_tokens)
    attempts = 0
    while remaining > 0 and attempts < 100 * n_tokens:
        attempts += 1
        tokens = _number_tokens(min(rng.randint(1, MAX_NUMBER_DIGITS), remaining), vocab, rng)
        start = rng.randrange(n_tokens - len(tokens) + 1)
        lo, hi = max(0, start - 1), min(n_tokens, start + len(tokens) + 1)
        if any(in_number[lo:hi]):
            continue
        labels[start : start + len(tokens)] = tokens
        in_number[start : start + len(tokens)] = [True] * len(tokens)
        remaining -= sum(token != vocab.point_id for token in tokens)


def _number_tokens(n_digits: int, vocab: DigitVocab, rng: random.Random) -> list[int]:
    """Token ids of a random number with ``n_digits`` digits, sometimes with a point inside."""
    tokens = [vocab.digit_ids[rng.randrange(10)] for _ in range(n_digits)]
    if n_digits >= 2 and rng.random() < POINT_PROBABILITY:
        tokens.insert(rng.randint(1, n_digits - 1), vocab.point_id)
    return tokens


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_mib(step: Step, device: torch.device) -> float:
    """Run ``step`` once and return its peak memory above the memory held before, in MiB."""
    gc.collect()
    if device.type == "cuda":
        return _cuda_peak(step, device) / MIB
    return _rss_peak(step) / MIB


def _cuda_peak(step: Step, device: torch.device) -> int:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def _rss_peak(step: Step, interval_s: float = 1e-3) -> int:
    process = psutil.Process()
    before = process.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            done.wait(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        step()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], process.memory_info().rss) - before


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def int_list(text: str) -> list[int]:
    return [int(part) for part in text.replace(",", " ").split()]
