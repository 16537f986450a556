"""Helpers shared by the benchmark scripts: synthetic labels with numbers, device sync, peak memory.

Number vocabularies: :data:`QWEN2_VOCAB` (Qwen2's ids, one digit per token) and
:func:`llama3_vocab` (Llama-3's 1,110 number tokens of widths 1..3: read from the real tokenizer
when given one, else a synthetic stand-in with Llama-3's ids of '0'..'9' and '.' and 1,100
distinct made-up ids for the width-2 and width-3 tokens; the real ones follow no rule that could
be written down, see the function).

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
QWEN2_VOCAB_SIZE = 151_936
LLAMA3_VOCAB_SIZE = 128_256
LLAMA3_DIGIT_IDS = tuple(range(15, 25))  # '0'..'9' in Llama-3's tokenizer
LLAMA3_POINT_ID = 13
# The synthetic stand-in's width-2/3 ids are drawn from the range the real ones lie in (410..28,384).
LLAMA3_SYNTHETIC_ID_RANGE = (100, 28_500)
IGNORE_INDEX = -100
DIGIT_FRACTION = 0.20
IGNORE_FRACTION = 0.05
POINT_PROBABILITY = 0.25  # chance that a number of >= 2 digits carries a point
MAX_NUMBER_DIGITS = 6
MIB = 2**20


def llama3_vocab(tokenizer_path: str | None = None) -> DigitVocab:
    """Llama-3's number vocabulary (K = 3: 10 + 100 + 1,000 number tokens).

    With ``tokenizer_path`` (a Hugging Face directory or a ``.gguf`` file such as
    ``ggml-vocab-llama-bpe.gguf``): the real ids, by ``DigitVocab.from_tokenizer``. Without it: a
    stand-in with the real ids of '0'..'9' (15..24) and '.' (13), and 1,100 distinct ids drawn
    with a fixed seed from :data:`LLAMA3_SYNTHETIC_ID_RANGE` for the width-2 and width-3 tokens.
    The real width-2/3 ids are neither contiguous nor ordered by value ('00' = 410, '01' = 1721,
    '000' = 931, '001' = 4119, ...; 410..6,365 and 679..28,384), so no compact rule gives them;
    the stand-in has the same count, spread and disorder, which is all the losses' cost depends on.
    """
    if tokenizer_path is not None:
        from del_core.tokenizers import load_tokenizer

        vocab = DigitVocab.from_tokenizer(load_tokenizer(tokenizer_path), name="llama3")
        if vocab.max_width != 3:
            raise ValueError(
                f"{tokenizer_path}: expected Llama-3's number tokens of widths 1..3, got {vocab.describe()}"
            )
        return vocab
    ids = random.Random(3).sample(range(*LLAMA3_SYNTHETIC_ID_RANGE), 1100)
    return DigitVocab(
        LLAMA3_DIGIT_IDS,
        LLAMA3_POINT_ID,
        name="llama3-synthetic",
        wide_ids=(tuple(ids[:100]), tuple(ids[100:])),
        grouping="left to right in groups of 3",
    )


def make_labels(n_tokens: int, vocab_size: int, vocab: DigitVocab, rng: random.Random) -> torch.Tensor:
    """int64 labels [1, N]: random ordinary tokens, ~20% number tokens in numbers, ~5% ignored.

    Numbers have 1..6 digits, some with a point inside; on a multi-digit vocabulary each digit run
    (the integer and the fractional part) is written as Llama-3 writes it, left to right in tokens
    of K digits and a last shorter one (``1234567.25`` -> ``123 456 7 . 25``). The 20% counts
    number-token positions, so both kinds of vocabulary get about as many scored positions; on a
    single-digit vocabulary the labels are the same as before multi-digit vocabularies existed."""
    special = set(vocab.number_ids) | {vocab.point_id}
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
    """Write numbers into ``labels`` at random free places until 20% of the positions are number
    tokens.

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
    """Token ids of a random number with ``n_digits`` digits, sometimes with a point inside
    (the random draws are those of the single-digit layout, so its labels did not change)."""
    digits = [rng.randrange(10) for _ in range(n_digits)]
    runs = [digits]
    if n_digits >= 2 and rng.random() < POINT_PROBABILITY:
        point = rng.randint(1, n_digits - 1)
        runs = [digits[:point], digits[point:]]
    tokens = []
    for i, run in enumerate(runs):
        if i:
            tokens.append(vocab.point_id)
        tokens += _run_tokens(run, vocab)
    return tokens


def _run_tokens(digits: list[int], vocab: DigitVocab) -> list[int]:
    """A digit run as number tokens: left to right in groups of K = ``vocab.max_width`` digits."""
    width, ids, offsets = vocab.max_width, vocab.number_ids, vocab.group_offsets
    tokens = []
    for start in range(0, len(digits), width):
        group = digits[start : start + width]
        value = int("".join(map(str, group)))
        tokens.append(ids[offsets[len(group) - 1] + value])
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
