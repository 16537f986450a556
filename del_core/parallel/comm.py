"""Collectives of the loss: in-place all-reduces for the vocab-parallel loss statistics, the
"copy to tensor-parallel region" of the LM head's input, the differentiable sum of a
sequence-parallel group's per-number sums, and a byte counter for tests."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Optional

import torch
import torch.distributed as dist

from ..losses.number_runs import SequenceShard


def vocab_range(vocab_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Contiguous rows ``[start, end)`` of ``rank``: the first ``vocab_size % world_size`` ranks
    hold one row more (151,936 over 3 ranks: 50,646 / 50,645 / 50,645)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside a world of {world_size}")
    if vocab_size < world_size:
        raise ValueError(f"cannot split {vocab_size} vocabulary rows over {world_size} ranks")
    base, extra = divmod(vocab_size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class CollectiveCounter:
    """Counts the calls and bytes of all-reduces made through :class:`DistributedReducer`."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0

    def record(self, tensor: torch.Tensor) -> None:
        self.calls += 1
        self.bytes += tensor.numel() * tensor.element_size()


_COUNTERS: list[CollectiveCounter] = []


@contextlib.contextmanager
def count_collectives() -> Iterator[CollectiveCounter]:
    """Within the block, count every all-reduce of the vocab-parallel path."""
    counter = CollectiveCounter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


def _all_reduce(tensor: torch.Tensor, op, group) -> torch.Tensor:
    for counter in _COUNTERS:
        counter.record(tensor)
    dist.all_reduce(tensor, op=op, group=group)
    return tensor


class DistributedReducer:
    """The :class:`del_core.losses.statistics.Reducer` of a tensor-parallel process group."""

    def __init__(self, group: Optional[dist.ProcessGroup] = None):
        self.group = group

    def max_(self, tensor: torch.Tensor) -> torch.Tensor:
        return _all_reduce(tensor, dist.ReduceOp.MAX, self.group)

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return _all_reduce(tensor, dist.ReduceOp.SUM, self.group)


class _CopyToRegion(torch.autograd.Function):
    """Identity forward; backward sums the gradient over the group (each rank's LM-head shard
    contributes part of the input's gradient)."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.contiguous(), dist.ReduceOp.SUM, ctx.group), None


def copy_to_tensor_parallel_region(tensor: torch.Tensor, group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """Mark the input of a vocab-sharded layer: identity forward, all-reduce SUM of the gradient."""
    if dist.get_world_size(group) == 1:
        return tensor
    return _CopyToRegion.apply(tensor, group)


class _SumOverGroup(torch.autograd.Function):
    """All-reduce SUM forward; backward all-reduce SUM of the gradient (every rank reads the sum)."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        return _all_reduce(tensor.clone(), dist.ReduceOp.SUM, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.contiguous().clone(), dist.ReduceOp.SUM, ctx.group), None


def sum_over_sequence_group(tensor: torch.Tensor, group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """``tensor`` summed over ``group`` (a new tensor; the input is left as it is), the
    :attr:`del_core.losses.SequenceShard.sum_over_group` of a sequence-parallel group.

    Differentiable: every rank r's loss ``L_r`` reads the same sum ``s = sum_q x_q`` of the
    ranks' tensors, so ``d(sum_r L_r) / d x_q = sum_r dL_r / ds``: the backward sums the incoming
    gradient over the group. A tensor without gradient (integers) is all-reduced directly."""
    if dist.get_world_size(group) == 1:
        return tensor.clone()
    if not tensor.requires_grad:
        return _all_reduce(tensor.clone(), dist.ReduceOp.SUM, group)
    return _SumOverGroup.apply(tensor, group)


def sequence_shard(rank: int, parts: int, group: Optional[dist.ProcessGroup]) -> Optional[SequenceShard]:
    """The loss's view of this process's shard ``rank`` of ``parts`` under sequence parallelism
    (the number-level losses sum each number over ``group`` with :func:`sum_over_sequence_group`);
    None without sequence parallelism (``parts`` 1)."""
    if parts == 1:
        return None
    return SequenceShard(rank, parts, functools.partial(sum_over_sequence_group, group=group))
