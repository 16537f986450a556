"""Batches of the Trainer adapter under DeepSpeed Ulysses sequence parallelism.

With ``TrainingArguments(parallelism_config=ParallelismConfig(sp_size=N, sp_backend="deepspeed"))``
the Trainer wraps its training dataloader in DeepSpeed's ``UlyssesSPDataLoaderAdapter``: the N
ranks of a sequence-parallel group pool one batch each, and every rank receives positions
``[r T / N, (r + 1) T / N)`` of every pooled batch, each [B, T] tensor of the batch dict cut along
dim 1 (``labels`` turned into ``shift_labels`` first). A number can straddle a cut, and the
place value of a digit depends on where its number's point is, possibly on another rank, so
:class:`WholeSequenceSpans` wraps the data collator: on the WHOLE batch, before the adapter cuts
it, it computes the number spans of the targets as the adapter will shift them, and puts them
into the batch dict as per-position columns (:func:`del_core.data.sequence_shards.span_columns`),
which the adapter then cuts with the tokens. It also pads the sequence to a multiple of N (the
adapter refuses other lengths) and adds ``position_ids`` ``0..T-1`` when the collator gave none
(the adapter needs them; they are the positions the model uses by default). With a fixed
sequence length (``DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False,
sp_seq_length=L)``) every batch is padded to L: the adapter all-gathers the batches of the group,
which gloo (CPU) accepts only for tensors of equal sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.sequence_shards import pad_sequence, pad_spans, padded_length, span_columns
from del_core.data.tokenized import continued_positions
from del_core.integrations.counting import aligned_targets
from del_core.spans import IGNORE_INDEX, number_spans
from del_core.vocab import DigitVocab

# Padding of the batch dict's [B, T] tensors (any other key but position_ids: 0, i.e. masked out).
_TARGET_PADDING = {"labels": IGNORE_INDEX, "shift_labels": IGNORE_INDEX}


def with_whole_sequence_spans(
    batch: Mapping[str, Any], vocab: Optional[DigitVocab], parts: int, pad_id: int, length: Optional[int] = None
) -> dict[str, Any]:
    """``batch`` (a collated dict with ``input_ids`` [B, T] and ``labels`` or ``shift_labels``)
    right-padded to a multiple of ``parts`` positions T' (input ``pad_id``, targets -100, position
    ids continuing each row's last (:func:`del_core.data.tokenized.continued_positions`), every
    other [B, T] tensor 0), with ``position_ids`` (``0..T'-1`` when absent) and, with a ``vocab``, the
    number spans of its aligned targets (:func:`del_core.integrations.aligned_targets`) computed
    on the whole sequences, as span columns. ``length``: pad to this many positions at least (a
    fixed sequence length; a longer batch is an error)."""
    batch = dict(batch)
    rows, width = batch["input_ids"].shape
    if length is not None and width > length:
        raise ValueError(f"a batch of {width} positions is longer than the fixed sequence length {length}")
    padded = padded_length(max(width, length or 0), parts)
    spans = number_spans(aligned_targets(batch), vocab) if vocab is not None else None
    for key, value in batch.items():
        if key == "position_ids" and torch.is_tensor(value) and value.shape == (rows, width):
            batch[key] = continued_positions(value, padded)
        elif torch.is_tensor(value) and value.dim() >= 2 and value.shape[:2] == (rows, width):
            batch[key] = pad_sequence(value, padded, pad_id if key == "input_ids" else _TARGET_PADDING.get(key, 0))
    if "position_ids" not in batch:
        batch["position_ids"] = torch.arange(padded, device=batch["input_ids"].device).repeat(rows, 1)
    if spans is not None:
        batch.update(span_columns(pad_spans(spans, padded)))
    return batch


@dataclass(frozen=True)
class WholeSequenceSpans:
    """A data collator: ``collate(rows)`` then :func:`with_whole_sequence_spans`."""

    collate: Callable[[list], Mapping[str, Any]]
    vocab: Optional[DigitVocab]
    parts: int
    pad_id: int
    length: Optional[int] = None

    def __call__(self, rows: list) -> dict[str, Any]:
        return with_whole_sequence_spans(self.collate(rows), self.vocab, self.parts, self.pad_id, self.length)
