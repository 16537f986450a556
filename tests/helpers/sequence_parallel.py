"""Numbers across the shard cuts of sequence parallelism: where the test batches put them."""

from __future__ import annotations

from del_core import NumberSpans


def numbers_across_cuts(spans: NumberSpans, parts: int) -> int:
    """How many (row, cut) pairs of ``spans`` [B, T] have a number running across one of the
    ``parts - 1`` cuts between equal shards of the (padded) sequence: the positions on both sides
    of the cut are in the same number (number token or point, the later one not opening a span)."""
    in_number = spans.is_digit | spans.is_point
    length = in_number.shape[1]
    size = -(-length // parts)
    cuts = [c * size for c in range(1, parts) if c * size < length]
    return sum(int((in_number[:, c - 1] & in_number[:, c] & ~spans.span_start[:, c]).sum()) for c in cuts)
