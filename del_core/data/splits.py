"""A run's training items and held-out set, from its data sources.

The held-out rows are, in this order of preference: ``eval_source``; for ``synthetic:N`` data a
fresh synthetic set from another seed (no shared problem by construction of the seeds); else the
first ``eval_size`` rows of a seeded permutation of the training rows, removed from training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

from del_core.data.rows import DataError, read_source
from del_core.data.tokenized import Example, Packed, encode_all, pack, shuffled

# The synthetic held-out set's seed offset: far from any training seed a recipe would use.
HELDOUT_SEED_OFFSET = 1_000_003


@dataclass
class TrainingData:
    """Tokenised training items (examples, or packed sequences with ``packing``) and the held-out
    rows with their tokenised examples (rows are kept for greedy answers and printing)."""

    items: list[Union[Example, Packed]]
    eval_rows: list[dict[str, str]]
    eval_examples: list[Example]


def _split_rows(
    source: str, split: str, eval_source: Optional[str], eval_size: int, seed: int, log: Callable[[str], None]
) -> tuple[list[dict], list[dict]]:
    rows = read_source(source, split, seed)
    if eval_source:
        return rows, read_source(eval_source, split, seed + 1)[: eval_size or None]
    if not eval_size:
        return rows, []
    if source.startswith("synthetic:"):
        return rows, read_source(f"synthetic:{eval_size}", seed=HELDOUT_SEED_OFFSET + seed)
    held = shuffled(list(range(len(rows))), seed)[:eval_size]
    held_set = set(held)
    log(
        f"[data] held out {len(held)} training rows for evaluation (set data.eval_source or data.eval_size=0 to change)"
    )
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
) -> TrainingData:
    """Read, split, tokenise (and pack) the data of a run; :class:`DataError` when nothing is left."""
    rows, eval_rows = _split_rows(source, split, eval_source, eval_size, seed, log)
    examples, report = encode_all(rows, tokenizer, max_length)
    log(f"[data] {source}: {report.summary()}")
    if not examples:
        raise DataError(f"{source}: no example keeps any response token within max_length {max_length}")
    items: list[Union[Example, Packed]] = list(examples)
    if packing:
        items = list(pack(shuffled(examples, seed), max_length))
        log(f"[data] packed {len(examples)} examples into {len(items)} sequences of <= {max_length} tokens")
    eval_examples, _ = encode_all(eval_rows, tokenizer, max_length)
    return TrainingData(items, eval_rows, eval_examples)
