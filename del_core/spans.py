"""Number spans and place values, vectorised over a batch (DEL_SPEC.md section 2).

A number span is a maximal run of consecutive positions of ONE sequence whose labels are number
tokens (digits, or the 1..K-digit tokens of a multi-digit vocabulary) or point tokens. For the
token at index j of a span whose first point is at index p (p = span length when there is none):

* number token, j < p (integer part):    u = 2k, k the integer place of its last digit
* number token, j > p (fractional part): u = 1.02 ** -(m + 1), m the fractional place of its
  last digit (a second point counts as one place, as in the spec's ``m = j - p``)
* point:                                 u = 0, no DEL term

With one digit per token, k = p - j and m = j - p: "1234" -> 8 6 4 2, "3.14" -> 2 0 0.9612 0.9423.
With Llama-3's tokens, "1234567.891" = 123 456 7 . 891 -> 10 4 2 0 1.02**-4
(docs/number_tokens.md).

Everything is computed with tensor operations (no Python loop over tokens, no host-device
synchronisation and no host-to-device copy once the digit ids are cached on the device), so it can
run inside the loss on the GPU.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .vocab import DigitVocab

FRACTION_BASE = 1.02
# The label of positions that predict nothing (prompt, padding, packed boundaries): the
# ignore_index of torch.nn.functional.cross_entropy and of Hugging Face models.
IGNORE_INDEX = -100


def invalid_labels(labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """bool tensor like ``labels``: entries that are neither IGNORE_INDEX nor a token id in
    ``[0, vocab_size)`` (the rule every label check of the package applies)."""
    return (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= vocab_size))


class NumberSpans(NamedTuple):
    """Per-position number structure of ``labels`` (all tensors have the labels' shape).

    is_digit:    bool, the label is a number token (one of '0'..'9', or a multi-digit token).
    is_point:    bool, the label is the point token.
    digit_value: int64, the number token's value (0..9 for a digit, 0..10^w - 1 for width w),
                 -1 elsewhere.
    place_value: float64, u of the spec at number tokens, 0 at points and outside numbers.
    place_index: int64, integer place k >= 1 of the token's last digit (units 1, tens 2, ...; the
                 fractional part counted as a separate integer: "3.14" -> 1 . 2 1), 0 elsewhere.
    span_start:  bool, the position opens a span.
    width:       int64, the number token's width w (1 for a digit), 0 elsewhere.
    """

    is_digit: torch.Tensor
    is_point: torch.Tensor
    digit_value: torch.Tensor
    place_value: torch.Tensor
    place_index: torch.Tensor
    span_start: torch.Tensor
    width: torch.Tensor


def number_tokens(labels: torch.Tensor, vocab: DigitVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """(width, value) int64 tensors like ``labels``: the width w and value of each label that is a
    number token of ``vocab``; (0, -1) for other labels. A sorted search, O(N log C)."""
    lookup = vocab.id_lookup(labels.device)
    where = torch.searchsorted(lookup.sorted_ids, labels.contiguous()).clamp_max(lookup.sorted_ids.numel() - 1)
    found = lookup.sorted_ids[where] == labels
    column = lookup.sorted_columns[where]
    width = torch.where(found, lookup.column_width[column], torch.zeros_like(column))
    value = torch.where(found, lookup.column_value[column], torch.full_like(column, -1))
    return width, value


def _span_sums(weights: torch.Tensor, slot: torch.Tensor, n: int) -> torch.Tensor:
    """[n + 1] per-slot sums of the int64 ``weights`` [n] (slot n collects positions outside spans)."""
    return torch.zeros(n + 1, dtype=torch.long, device=weights.device).scatter_add(0, slot, weights)


def number_spans(labels: torch.Tensor, vocab: DigitVocab) -> NumberSpans:
    """Find the number spans of ``labels`` [..., T] (the last dim is the sequence) per sequence.

    Ignored positions (-100) and any other token end a span; spans never cross from one sequence
    of the batch to the next.
    """
    if labels.dim() == 0:
        raise ValueError("labels must have a sequence dimension, got a scalar")
    shape = labels.shape
    seq = labels.reshape(-1, shape[-1])
    device = seq.device
    width, value = number_tokens(seq, vocab)
    is_digit = width > 0
    is_point = seq == vocab.point_id
    in_num = is_digit | is_point

    prev = torch.zeros_like(in_num)
    prev[:, 1:] = in_num[:, :-1]
    start = in_num & ~prev

    flat_in = in_num.reshape(-1)
    flat_start = start.reshape(-1)
    n = flat_in.numel()
    pos = torch.arange(n, device=device)
    # Index of the start of the span a position belongs to (valid inside spans): the latest start
    # at or before it. Spans start at every sequence's first in-number position, so the running
    # maximum never reaches back into another sequence for positions that are in a span.
    start_pos = torch.where(flat_start, pos, torch.zeros_like(pos)).cummax(0).values
    j = pos - start_pos
    # One slot per span, keyed by its start position; positions outside spans go to slot n.
    slot = torch.where(flat_in, start_pos, torch.full_like(pos, n))
    span_len = torch.zeros(n + 1, dtype=torch.long, device=device).scatter_reduce(
        0, slot, j + 1, reduce="amax", include_self=True
    )
    flat_point = is_point.reshape(-1)
    point_slot = torch.where(flat_point, slot, torch.full_like(pos, n))
    first_point = torch.full((n + 1,), n + 1, dtype=torch.long, device=device).scatter_reduce(
        0, point_slot, j, reduce="amin", include_self=True
    )
    p = torch.minimum(first_point[slot], span_len[slot])

    flat_digit = is_digit.reshape(-1)
    integer_part = flat_digit & (j < p)
    fraction_part = flat_digit & (j > p)
    # Places count digits: a token of width w covers w places, a point one (the spec's j - p).
    w = width.reshape(-1)
    places = w + flat_point.to(torch.long)
    places_through = _within_span_cumsum(places, start_pos)  # inclusive, from the span's start
    digits_through = _within_span_cumsum(w, start_pos)
    integer_digits = _span_sums(torch.where(integer_part, w, torch.zeros_like(w)), slot, n)[slot]
    k_int = (integer_digits - places_through + 1).clamp_min(0)
    m = (places_through - integer_digits - 1).clamp_min(0)
    # float64 so that float64 losses (gradcheck) see exact place values; it is N numbers.
    u = torch.where(integer_part, 2.0 * k_int.to(torch.float64), torch.zeros(n, dtype=torch.float64, device=device))
    u = torch.where(fraction_part, torch.pow(FRACTION_BASE, -(m + 1).to(torch.float64)), u)

    # Fractional digits read as a separate integer: the place of the token's last digit in it.
    k_frac = _span_sums(w, slot, n)[slot] - digits_through + 1
    place_index = torch.where(integer_part, k_int, torch.where(fraction_part, k_frac, torch.zeros_like(k_int)))

    return NumberSpans(
        is_digit=is_digit.reshape(shape),
        is_point=is_point.reshape(shape),
        digit_value=value.reshape(shape),
        place_value=u.reshape(shape),
        place_index=place_index.reshape(shape),
        span_start=start.reshape(shape),
        width=width.reshape(shape),
    )


def _within_span_cumsum(weights: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:
    """Inclusive running sum of ``weights`` [n] from the start of each position's span."""
    through = torch.cumsum(weights, 0)
    return through - (through[start_pos] - weights[start_pos])
