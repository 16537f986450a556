"""A column-parallel (vocab-parallel) LM head over a tensor-parallel process group."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from ..losses.statistics import VocabSlice
from .comm import DistributedReducer, copy_to_tensor_parallel_region, vocab_range


def vocab_slice_for(vocab_size: int, group: Optional[dist.ProcessGroup] = None) -> VocabSlice:
    """This rank's :class:`VocabSlice` of ``vocab_size`` over ``group`` (default: the world)."""
    start, end = vocab_range(vocab_size, dist.get_rank(group), dist.get_world_size(group))
    return VocabSlice(start, end, vocab_size, DistributedReducer(group))


class VocabParallelLMHead(torch.nn.Module):
    """Holds the rows ``[start, end)`` of an LM-head weight [V, H]; ``forward`` returns this rank's
    logit columns [..., V_local]. Uneven splits are allowed (see :func:`vocab_range`)."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        group: Optional[dist.ProcessGroup] = None,
        dtype: Optional[torch.dtype] = None,
        device=None,
    ):
        super().__init__()
        self.group = group
        self.vocab_slice = vocab_slice_for(vocab_size, group)
        self.weight = torch.nn.Parameter(torch.empty(self.vocab_slice.size, hidden_size, dtype=dtype, device=device))
        torch.nn.init.normal_(self.weight, std=0.02)  # replaced by from_full_weight's copy

    @classmethod
    def from_full_weight(cls, weight: torch.Tensor, group: Optional[dist.ProcessGroup] = None) -> VocabParallelLMHead:
        """A head whose rows are this rank's slice of the full weight [V, H] (e.g. an HF lm_head)."""
        head = cls(weight.shape[0], weight.shape[1], group, dtype=weight.dtype, device=weight.device)
        with torch.no_grad():
            head.weight.copy_(weight[head.vocab_slice.start : head.vocab_slice.end])
        return head

    def gather_input(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` marked as the input of this head: its gradient is summed over the group."""
        return copy_to_tensor_parallel_region(hidden, self.group)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.gather_input(hidden) @ self.weight.T

    @torch.no_grad()
    def full_weight(self) -> torch.Tensor:
        """The whole weight [V, H] on every rank (for saving); one all-gather of the rows."""
        world = dist.get_world_size(self.group)
        ranges = [vocab_range(self.vocab_slice.vocab_size, r, world) for r in range(world)]
        rows = ranges[0][1] - ranges[0][0]  # rank 0 holds the most rows
        padded = torch.zeros(rows, self.weight.shape[1], dtype=self.weight.dtype, device=self.weight.device)
        padded[: self.vocab_slice.size] = self.weight
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=self.group)
        return torch.cat([part[: end - start] for part, (start, end) in zip(gathered, ranges)])
