"""A run's training items and held-out set, from its data sources.

The held-out rows are, in this order of preference: ``eval_source``; for synthetic data
(``synthetic:N``, ``synthetic:SET:N``) a fresh set from another seed, of distinct questions none of
which is a training question; else the first ``eval_size`` rows of a seeded permutation of the
training rows, removed from training.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from del_core.data.rows import DataError, SyntheticSpec, read_source
from del_core.data.tokenized import EncodeReport, Example, Packed, encode_all, pack, shuffled

# The synthetic held-out set's seed offset: far from any training seed a recipe would use.
HELDOUT_SEED_OFFSET = 1_000_003


@dataclass
class TrainingData:
    """Tokenised training items (examples, or packed sequences with ``packing``) and the held-out
    rows with their tokenised examples (rows are kept for greedy answers and printing)."""

    items: Sequence[Union[Example, Packed]]  # a list, or Arrow-backed (del_core.data.dataset_cache)
    eval_rows: list[dict]
    eval_examples: list[Example]


def separate_heldout(
    source: str, split: str, eval_source: Optional[str], eval_size: int, seed: int
) -> Optional[list[dict]]:
    """The held-out rows when they are not taken from the training rows: ``eval_source``'s, a fresh
    synthetic set, or none (``eval_size`` 0); None when they are a slice of the training rows."""
    if eval_source:
        return read_source(eval_source, split, seed + 1)[: eval_size or None]
    if not eval_size:
        return []
    if source.startswith("synthetic:"):
        training = SyntheticSpec.parse(source)
        questions = {row["instruction"] for row in training.rows(seed)}
        heldout = SyntheticSpec(training.set_name, eval_size)
        return heldout.rows(HELDOUT_SEED_OFFSET + seed, exclude=questions, distinct=True)
    return None


def heldout_slice(num_rows: int, eval_size: int, seed: int) -> list[int]:
    """The positions of the training rows held out for evaluation: the first ``eval_size`` of a
    seeded permutation (removed from training, which keeps the others in their order)."""
    return shuffled(list(range(num_rows)), seed)[:eval_size]


HELDOUT_NOTE = "set data.eval_source or data.eval_size=0 to change"


def _split_rows(
    source: str, split: str, eval_source: Optional[str], eval_size: int, seed: int, log: Callable[[str], None]
) -> tuple[list[dict], list[dict]]:
    rows = read_source(source, split, seed)
    separate = separate_heldout(source, split, eval_source, eval_size, seed)
    if separate is not None:
        return rows, separate
    held = heldout_slice(len(rows), eval_size, seed)
    held_set = set(held)
    log(f"[data] held out {len(held)} training rows for evaluation ({HELDOUT_NOTE})")
    return [row for i, row in enumerate(rows) if i not in held_set], [rows[i] for i in held]


def prepare_training_data(
    source: str,
    split: str,
    eval_source: Optional[str],
    eval_size: int,
    max_length: int,
    packing: bool,
    seed: int,
    tokenizer: Any,
    log: Callable[[str], None],
    prompt_format: str = "alpaca",
) -> TrainingData:
    """Read, split, tokenise (and pack) the data of a run in this process's memory (the reference
    for :func:`del_core.data.dataset_cache.prepare_cached_training_data`, which the trainer uses);
    :class:`DataError` when nothing is left."""
    rows, eval_rows = _split_rows(source, split, eval_source, eval_size, seed, log)
    examples, report = encode_all(rows, tokenizer, max_length, prompt_format)
    log(f"[data] {source}: {report.summary()}")
    check_not_empty(report, source, max_length)
    items: list[Union[Example, Packed]] = list(examples)
    if packing:
        items = list(pack(shuffled(examples, seed), max_length))
        log(packing_note(len(examples), len(items), max_length))
    eval_examples, _ = encode_all(eval_rows, tokenizer, max_length, prompt_format)
    return TrainingData(items, eval_rows, eval_examples)


def check_not_empty(report: EncodeReport, source: str, max_length: int) -> None:
    """:class:`DataError` when no example keeps a response token."""
    if report.examples == report.dropped_examples:
        raise DataError(f"{source}: no example keeps any response token within max_length {max_length}")


def packing_note(examples: int, sequences: int, max_length: int) -> str:
    return f"[data] packed {examples} examples into {sequences} sequences of <= {max_length} tokens"
