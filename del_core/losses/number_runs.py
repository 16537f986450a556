"""Digit runs of a label sequence: the numbers the number-level losses score as wholes.

A *run* is a maximal stretch of consecutive positions of one sequence whose labels are digit
tokens; any other label (the point, a comma, an ignored position) ends it, so "12.34" is the runs
"12" and "34". With ``join_points`` a single point between two digits joins them ("12.34" is the
one run "1234", the point inside it contributing nothing; ntloss's ``float_level``).

Computed with tensor operations on the whole sequences (no host sync), before any
sequence-parallel cut: a run's place exponents depend on the digits after it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..spans import NumberSpans


class NumberRuns(NamedTuple):
    """Per-position run structure, each [N] over the flattened ``[..., T]`` labels.

    is_digit:     bool, the label is one of the ten digit tokens.
    digit:        int64, the label's digit 0..9 at digit positions, 0 elsewhere.
    digits_after: int64, the number of digits after this one in its run (units 0), 0 elsewhere.
    run_start:    int64, the flat index of the first position of the run holding the position
                  (its first digit); the position itself outside runs.
    is_run_start: bool, the position is the first digit of a run.
    row:          int64, the sequence (row of the flattened ``[-1, T]`` labels) of the position.
    """

    is_digit: torch.Tensor
    digit: torch.Tensor
    digits_after: torch.Tensor
    run_start: torch.Tensor
    is_run_start: torch.Tensor
    row: torch.Tensor


def number_runs(is_digit: torch.Tensor, digit: torch.Tensor, is_point: torch.Tensor, join_points: bool) -> NumberRuns:
    """The runs of labels ``[..., T]`` (the last dim is the sequence) given per position whether
    the label is a digit token, its digit value (any value elsewhere) and whether it is the point.
    Runs never cross from one sequence to the next."""
    seq_len = is_digit.shape[-1]
    dig = is_digit.reshape(-1, seq_len)
    prev = torch.zeros_like(dig)
    prev[:, 1:] = dig[:, :-1]
    in_run = dig
    if join_points:
        after = torch.zeros_like(dig)
        after[:, :-1] = dig[:, 1:]
        in_run = dig | (is_point.reshape(-1, seq_len) & prev & after)
    prev_in = torch.zeros_like(in_run)
    prev_in[:, 1:] = in_run[:, :-1]
    starts = (in_run & ~prev_in).reshape(-1)
    flat_in = in_run.reshape(-1)
    flat_dig = dig.reshape(-1)
    n = flat_in.numel()
    pos = torch.arange(n, device=dig.device)
    # The latest start at or before a position: its run's first position (runs start at a digit).
    start_pos = torch.where(starts, pos, torch.zeros_like(pos)).cummax(0).values
    start_pos = torch.where(flat_in, start_pos, pos)
    digits = flat_dig.long()
    through = torch.cumsum(digits, 0)  # inclusive digit count from the first position
    run_digits = torch.zeros(n, dtype=torch.long, device=dig.device).scatter_add(0, start_pos, digits)
    before_run = through[start_pos] - digits[start_pos]
    digits_after = torch.where(flat_dig, run_digits[start_pos] - (through - before_run), torch.zeros_like(pos))
    value = torch.where(flat_dig, digit.reshape(-1), torch.zeros_like(pos))
    return NumberRuns(flat_dig, value, digits_after, start_pos, starts & flat_dig, pos // seq_len)


def batch_runs(spans: NumberSpans, rows: int, join_points: bool) -> NumberRuns:
    """The runs of a loss batch's flattened spans (``Batch.spans``, [N]) of ``rows`` sequences."""
    shape = (max(rows, 1), -1)
    return number_runs(
        spans.is_digit.view(shape), spans.digit_value.view(shape), spans.is_point.view(shape), join_points
    )


def per_run_sum(values: torch.Tensor, runs: NumberRuns) -> torch.Tensor:
    """[N] the sum of ``values`` [N] over each run, held at the run's first position (0 elsewhere)."""
    summed = torch.zeros_like(values).scatter_add(0, runs.run_start, torch.where(runs.is_digit, values, 0.0))
    return torch.where(runs.is_run_start, summed, torch.zeros_like(summed))


def per_row_count(mask: torch.Tensor, runs: NumberRuns, rows: int) -> torch.Tensor:
    """[rows] int64: how many positions of ``mask`` [N] each sequence holds."""
    return torch.zeros(rows, dtype=torch.long, device=mask.device).scatter_add(0, runs.row, mask.long())
