"""Targets and normaliser counts of the batches a Hugging Face ``Trainer`` hands out.

A causal-LM batch holds ``labels`` [B, T] aligned with ``input_ids``: the model shifts, so the
logits at position t predict ``labels[t + 1]`` (-100 = ignored). Padding-free collators and context
parallelism may instead give pre-shifted ``shift_labels`` [B, T] (position t predicts
``shift_labels[t]``). :func:`aligned_targets` turns either into targets aligned with the logits of
every input position, which is what a del_core loss takes. The counts are taken on those targets by
the trainer's own count (:func:`del_core.data.normalisers.target_counts`), so they are exactly the
counts the loss sees: the Trainer's ``num_items_in_batch`` for the tokens (it counts
``labels[..., 1:]`` or ``shift_labels``), and the number-token positions of
:func:`del_core.number_spans` for the digits.

Nothing here imports the Trainer; nothing reads a tensor back to the host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.normalisers import target_counts
from del_core.data.sequence_shards import SPAN_COLUMNS, pop_span_columns
from del_core.spans import IGNORE_INDEX, NumberSpans
from del_core.vocab import DigitVocab

__all__ = ["TARGET_KEYS", "WindowCounts", "aligned_targets", "carried_spans", "target_counts", "window_target_counts"]

# The batch keys that hold targets and their number spans; they are not passed to the model's forward.
TARGET_KEYS = ("labels", "shift_labels", *SPAN_COLUMNS)


@dataclass(frozen=True)
class WindowCounts:
    """The normalisers of one optimizer step: non-ignored targets (``num_tokens``) and number-token
    targets (``num_digits``) of all the step's micro-batches (the gradient-accumulation window) on
    all data-parallel ranks, as 0-dim int64 tensors on the training device. ``micro_batches`` is
    the number of micro-batches of this rank in the window."""

    num_tokens: torch.Tensor
    num_digits: torch.Tensor
    micro_batches: int


def aligned_targets(batch: Mapping[str, Any]) -> torch.Tensor:
    """[B, T] int64 targets aligned position by position with the model's logits [B, T, V].

    ``shift_labels`` as given when the batch has them; otherwise ``labels[..., 1:]`` followed by
    one ignored position (the last input position predicts nothing). Padding the targets, rather
    than slicing the logits, keeps the logits contiguous: the loss never copies them.
    """
    if batch.get("shift_labels") is not None:
        return batch["shift_labels"]
    labels = batch.get("labels")
    if labels is None:
        raise KeyError(
            "the batch has no 'labels' (nor 'shift_labels'): the del_core Trainer integration computes the "
            "loss from them; make the data collator return labels (-100 where nothing is predicted)"
        )
    ignored = labels.new_full((*labels.shape[:-1], 1), IGNORE_INDEX)
    return torch.cat([labels[..., 1:], ignored], dim=-1)


def carried_spans(batch: Mapping[str, Any]) -> Optional[NumberSpans]:
    """The number spans a batch dict carries as span columns (computed on the whole sequences
    before a sequence-parallel cut, :mod:`del_core.integrations.sequence_parallel`), aligned with
    :func:`aligned_targets`; None when it carries none. The batch is left as it is."""
    return pop_span_columns(dict(batch))


def window_target_counts(
    batches: Sequence[Mapping[str, Any]], vocab: Optional[DigitVocab], device: torch.device
) -> torch.Tensor:
    """[2] int64 on ``device``: :func:`target_counts` summed over ``batches`` (this rank only)."""
    total = torch.zeros(2, dtype=torch.long, device=device)
    for batch in batches:
        total += target_counts(aligned_targets(batch), vocab, carried_spans(batch)).to(device)
    return total
