"""Number spans and place values, vectorised over a batch (DEL_SPEC.md section 2).

A number span is a maximal run of consecutive positions of ONE sequence whose labels are digit or
point tokens. For the token at index j of a span whose first point is at index p (p = span length
when there is none):

* digit, j < p (integer part):    u = 2 * (p - j)             ("1234" -> 8 6 4 2)
* digit, j > p (fractional part): u = 1.02 ** -(j - p + 1)    ("3.14" -> 2 0 0.9612 0.9423)
* point:                          u = 0, no DEL term

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

    is_digit:    bool, the label is one of the ten digit tokens.
    is_point:    bool, the label is the point token.
    digit_value: int64, 0..9 at digit positions, -1 elsewhere.
    place_value: float64, u of the spec at digits, 0 at points and outside numbers.
    place_index: int64, integer place k >= 1 at digits (units 1, tens 2, ...; the fractional part
                 counted as a separate integer: "3.14" -> 1 . 2 1), 0 elsewhere.
    span_start:  bool, the position opens a span.
    """

    is_digit: torch.Tensor
    is_point: torch.Tensor
    digit_value: torch.Tensor
    place_value: torch.Tensor
    place_index: torch.Tensor
    span_start: torch.Tensor


def digit_values(labels: torch.Tensor, digit_ids: torch.Tensor) -> torch.Tensor:
    """int64 tensor like ``labels``: the digit 0..9 a label stands for, -1 for other labels."""
    match = labels.unsqueeze(-1) == digit_ids.to(labels.device)
    value = match.to(torch.long).argmax(-1)
    return torch.where(match.any(-1), value, torch.full_like(value, -1))


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
    digit = digit_values(seq, vocab.digit_tensor(device))
    is_digit = digit >= 0
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
    k_int = (p - j).clamp_min(0)
    m = (j - p).clamp_min(0)
    # float64 so that float64 losses (gradcheck) see exact place values; it is N numbers.
    u = torch.where(integer_part, 2.0 * k_int.to(torch.float64), torch.zeros(n, dtype=torch.float64, device=device))
    u = torch.where(fraction_part, torch.pow(FRACTION_BASE, -(m + 1).to(torch.float64)), u)

    # Fractional digits as a separate integer: count the digits from j to the span's end.
    digits_before = torch.cumsum(flat_digit.to(torch.long), 0) - flat_digit.to(torch.long)
    digits_in_span = torch.zeros(n + 1, dtype=torch.long, device=device).scatter_add(0, slot, flat_digit.to(torch.long))
    first_digit_count = digits_before[start_pos]
    k_frac = digits_in_span[slot] - (digits_before - first_digit_count)
    place_index = torch.where(integer_part, k_int, torch.where(fraction_part, k_frac, torch.zeros_like(k_int)))

    return NumberSpans(
        is_digit=is_digit.reshape(shape),
        is_point=is_point.reshape(shape),
        digit_value=digit.reshape(shape),
        place_value=u.reshape(shape),
        place_index=place_index.reshape(shape),
        span_start=start.reshape(shape),
    )
