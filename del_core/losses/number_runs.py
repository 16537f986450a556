"""Digit runs of a label sequence: the numbers the number-level losses score as wholes.

A *run* is a maximal stretch of consecutive positions of one sequence whose labels are digit
tokens; any other label (the point, a comma, an ignored position) ends it, so "12.34" is the runs
"12" and "34". With ``join_points`` a single point between two digits joins them ("12.34" is the
one run "1234", the point inside it contributing nothing; ntloss's ``float_level``).

Computed with tensor operations on the whole sequences (no host sync): a run's place exponents
depend on the digits after it, possibly on another rank under sequence parallelism. There
:func:`shard_runs` gathers the digits of the whole sequences (one integer per position) and
:func:`number_sum` sums each number's per-position values over the group, so that a number cut
between two ranks scores exactly as on the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Optional

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


@dataclass(frozen=True)
class SequenceShard:
    """This process's part of its sequences under sequence parallelism (Ulysses): it holds
    positions ``[rank * T, (rank + 1) * T)`` of every sequence of ``parts * T`` positions (the
    same rows on every rank of the group).

    ``sum_over_group``: a tensor summed over the ranks of the group, the same on each; for a
    floating-point tensor that needs gradients the backward sums the gradient over the group too
    (:func:`del_core.parallel.sum_over_sequence_group`). Every rank calls it the same number of
    times with tensors of the same shape (a collective)."""

    rank: int
    parts: int
    sum_over_group: Callable[[torch.Tensor], torch.Tensor]

    def __post_init__(self):
        if not 0 <= self.rank < self.parts:
            raise ValueError(f"sequence shard {self.rank} outside {self.parts} shards")


class ShardRuns(NamedTuple):
    """The runs of the positions one loss call scores, each number identified across the cut.

    runs:      :class:`NumberRuns` [N] of the call's positions, computed on the WHOLE sequences;
               ``run_start`` indexes ``slots`` (the first digit's flat index in the whole
               ``[rows, parts * T]`` batch: the same id on every rank of the group) and
               ``is_run_start`` marks the one rank that holds a number's first digit (its owner).
    slots:     the length of a per-number vector (the whole batch's positions).
    positions: [N] int64, each position's flat index in the whole batch, or None (the call
               scores every position of its sequences).
    digits_per_row, runs_per_row: [rows] int64 counts of the whole sequences.
    sum_over_group: a per-number vector summed over the group (None without a cut).
    """

    runs: NumberRuns
    slots: int
    positions: Optional[torch.Tensor]
    digits_per_row: torch.Tensor
    runs_per_row: torch.Tensor
    sum_over_group: Optional[Callable[[torch.Tensor], torch.Tensor]]


# The code of a position in the gathered structure: 0 outside numbers, 1 + digit, or the point.
_POINT_CODE = 11


def shard_runs(
    spans: NumberSpans,
    rows: int,
    join_points: bool,
    shard: Optional[SequenceShard],
    positions: Optional[torch.Tensor] = None,
) -> ShardRuns:
    """The runs of a loss batch's flattened spans ([N] each, ``rows`` sequences).

    Without ``shard`` (or with one part) the runs of the call's own sequences; with ``positions``
    ([M] int64 flat indices into the spans: the rows a compacted call scores) the runs of the whole
    sequences read at those positions, so that two numbers with ignored positions between them stay
    two numbers. With a shard, each rank puts its positions' digit / point codes (one int64 per
    position) into its slot of the whole batch, the group sums them (every rank then holds the
    whole sequences' digits, never logits), and the runs are those of the whole sequences, read
    at this rank's positions (with ``positions``: at those of the shard's flat positions)."""
    if shard is None or shard.parts == 1:
        runs = batch_runs(spans, rows, join_points)
        digits, starts = per_row_count(runs.is_digit, runs, rows), per_row_count(runs.is_run_start, runs, rows)
        if positions is None:
            return ShardRuns(runs, runs.is_digit.numel(), None, digits, starts, None)
        read = NumberRuns(*(field.index_select(0, positions) for field in runs))
        return ShardRuns(read, runs.is_digit.numel(), positions, digits, starts, None)
    rows = max(rows, 1)
    local = spans.is_digit.numel() // rows
    code = torch.where(spans.is_digit, spans.digit_value + 1, torch.where(spans.is_point, _POINT_CODE, 0))
    slots = torch.zeros(rows, shard.parts, local, dtype=torch.long, device=code.device)
    slots[:, shard.rank] = code.view(rows, local)
    whole = shard.sum_over_group(slots).view(rows, shard.parts * local)
    is_digit = (whole >= 1) & (whole <= 10)
    runs = number_runs(is_digit, whole - 1, whole == _POINT_CODE, join_points)
    offsets = torch.arange(rows, device=code.device).unsqueeze(-1) * (shard.parts * local) + shard.rank * local
    in_whole = (offsets + torch.arange(local, device=code.device)).reshape(-1)  # the shard's positions
    if positions is not None:
        in_whole = in_whole.index_select(0, positions)
    return ShardRuns(
        NumberRuns(*(field[in_whole] for field in runs)),
        runs.is_digit.numel(),
        in_whole,
        per_row_count(runs.is_digit, runs, rows),
        per_row_count(runs.is_run_start, runs, rows),
        shard.sum_over_group,
    )


def number_sum(values: torch.Tensor, layout: ShardRuns) -> torch.Tensor:
    """[N] the sum of ``values`` [N] over each number, held at the number's first digit on the rank
    that owns it (0 elsewhere): :func:`per_run_sum`, across the cut when ``layout`` has one, over
    the whole batch's per-number vector when the call scores some of its positions.

    Across the cut each rank scatters its positions' values into the per-number vector and the
    group sums it. Its backward sums the gradient over the group, which is the exact gradient of
    the summed loss: every rank r reads the same sum ``s = sum_q p_q`` of the ranks' partial sums
    ``p_q``, so ``d(sum_r L_r) / d p_q = sum_r dL_r / ds`` for every q; the owner alone scores a
    number, so each number counts once in ``sum_r L_r``."""
    if layout.positions is None:
        return per_run_sum(values, layout.runs)
    runs = layout.runs
    partial = torch.zeros(layout.slots, dtype=values.dtype, device=values.device)
    partial = partial.scatter_add(0, runs.run_start, torch.where(runs.is_digit, values, 0.0))
    if layout.sum_over_group is not None:
        partial = layout.sum_over_group(partial)
    summed = partial[runs.run_start]
    return torch.where(runs.is_run_start, summed, torch.zeros_like(summed))
