"""Cutting collated batches along the sequence for sequence parallelism (pure tensor functions).

Under sequence parallelism (Ulysses) the ``parts`` ranks of a group hold the same batch and rank
``r`` computes positions ``[r * T / parts, (r + 1) * T / parts)``. A number can straddle a cut,
and the place value of a digit depends on where its number's point is, possibly on another
rank: so the number spans (:func:`del_core.number_spans`) and the step's normalisers are
computed on the WHOLE sequences first, and the span tensors are cut with the tokens. Targets
are already aligned with the positions that predict them (``targets[t] = input_ids[t + 1]``),
so cutting them with the inputs loses no target at a cut.

A sequence length that ``parts`` does not divide is padded at the right to the next multiple:
input ``pad_id``, target IGNORE_INDEX, attention mask 0, position id 0 (each padded position is
its own one-token example: no real token attends to it, and it predicts nothing), span tensors
as outside any number (:data:`SPANS_PADDING`), exactly what :func:`del_core.number_spans`
gives for IGNORE_INDEX labels.

For pipelines that carry a batch as a dict of [B, T] tensors (DeepSpeed's
``UlyssesSPDataLoaderAdapter`` cuts every such tensor along dim 1), :func:`span_columns` and
:func:`pop_span_columns` put the spans into / take them out of the dict under
:data:`SPAN_COLUMNS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import MutableMapping
from typing import Optional, Union

import torch

from del_core.data.tokenized import TokenBatch
from del_core.spans import IGNORE_INDEX, NumberSpans

# The value of each NumberSpans field at a position outside any number (padding included).
SPANS_PADDING = NumberSpans(
    is_digit=False, is_point=False, digit_value=-1, place_value=0.0, place_index=0, span_start=False, width=0
)
# The dict keys of the span tensors in a batch dict, one per NumberSpans field, in field order.
SPAN_COLUMNS = tuple(f"spans.{name}" for name in NumberSpans._fields)


def padded_length(length: int, parts: int) -> int:
    """The smallest multiple of ``parts`` that is >= ``length`` (``parts`` >= 1)."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    return -(-length // parts) * parts


def pad_sequence(tensor: torch.Tensor, length: int, value: Union[int, float, bool]) -> torch.Tensor:
    """``tensor`` [B, T, ...] with dim 1 right-padded with ``value`` to ``length`` (>= T); the
    tensor itself when it already has that length."""
    missing = length - tensor.shape[1]
    if missing < 0:
        raise ValueError(f"cannot pad a sequence of {tensor.shape[1]} positions to {length}")
    if missing == 0:
        return tensor
    fill = torch.full((tensor.shape[0], missing, *tensor.shape[2:]), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([tensor, fill], dim=1)


def shard_range(length: int, rank: int, parts: int) -> tuple[int, int]:
    """Positions ``[start, end)`` of shard ``rank`` of ``parts`` equal contiguous shards of a
    sequence of ``length`` positions (``parts`` must divide ``length``)."""
    if not 0 <= rank < parts:
        raise ValueError(f"shard {rank} outside {parts} shards")
    if length % parts:
        raise ValueError(f"a sequence of {length} positions does not split into {parts} equal shards; pad it first")
    size = length // parts
    return rank * size, (rank + 1) * size


def shard_sequence(tensor: torch.Tensor, rank: int, parts: int) -> torch.Tensor:
    """Shard ``rank`` of ``parts`` of ``tensor`` [B, T, ...] along dim 1, contiguous."""
    start, end = shard_range(tensor.shape[1], rank, parts)
    return tensor[:, start:end].contiguous()


def pad_spans(spans: NumberSpans, length: int) -> NumberSpans:
    """``spans`` ([B, T] each) right-padded to ``length`` positions with :data:`SPANS_PADDING`."""
    return NumberSpans(*(pad_sequence(t, length, fill) for t, fill in zip(spans, SPANS_PADDING)))


def shard_spans(spans: NumberSpans, rank: int, parts: int) -> NumberSpans:
    """Shard ``rank`` of ``parts`` of every span tensor (cut with the tokens, not recomputed)."""
    return NumberSpans(*(shard_sequence(t, rank, parts) for t in spans))


def pad_batch(batch: TokenBatch, length: int, pad_id: int) -> TokenBatch:
    """``batch`` right-padded to ``length`` positions (see the module docstring for the values)."""
    spans = pad_spans(batch.spans, length) if batch.spans is not None else None
    return TokenBatch(
        input_ids=pad_sequence(batch.input_ids, length, pad_id),
        targets=pad_sequence(batch.targets, length, IGNORE_INDEX),
        attention_mask=pad_sequence(batch.attention_mask, length, 0),
        position_ids=pad_sequence(batch.position_ids, length, 0),
        spans=spans,
    )


def shard_batch(batch: TokenBatch, rank: int, parts: int, pad_id: int) -> TokenBatch:
    """Shard ``rank`` of ``parts`` of a collated ``batch`` [B, T]: padded to a multiple of
    ``parts`` (:func:`padded_length`), then positions ``[r * T' / parts, (r + 1) * T' / parts)``
    of every tensor, its number spans included. The spans must have been computed on the whole
    batch (:meth:`TokenBatch.with_spans`) before the cut; a batch without spans stays without.
    With ``parts == 1`` the batch itself."""
    if parts == 1:
        return batch
    padded = pad_batch(batch, padded_length(batch.input_ids.shape[1], parts), pad_id)
    spans = shard_spans(padded.spans, rank, parts) if padded.spans is not None else None
    return dataclasses.replace(
        padded,
        input_ids=shard_sequence(padded.input_ids, rank, parts),
        targets=shard_sequence(padded.targets, rank, parts),
        attention_mask=shard_sequence(padded.attention_mask, rank, parts),
        position_ids=shard_sequence(padded.position_ids, rank, parts),
        spans=spans,
    )


def span_columns(spans: NumberSpans) -> dict[str, torch.Tensor]:
    """The span tensors as batch-dict entries ``{SPAN_COLUMNS[i]: spans[i]}`` ([B, T] each)."""
    return dict(zip(SPAN_COLUMNS, spans))


def pop_span_columns(batch: MutableMapping[str, torch.Tensor]) -> Optional[NumberSpans]:
    """The :class:`NumberSpans` stored in ``batch`` by :func:`span_columns`, removed from it; None
    when the batch holds none. A batch holding only some of the columns is an error."""
    present = [key for key in SPAN_COLUMNS if key in batch]
    if not present:
        return None
    if len(present) != len(SPAN_COLUMNS):
        missing = sorted(set(SPAN_COLUMNS) - set(present))
        raise KeyError(f"the batch holds some span columns but not {', '.join(missing)}")
    return NumberSpans(*(batch.pop(key) for key in SPAN_COLUMNS))
