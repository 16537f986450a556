"""The parallel layout of a training run and the few collectives the trainer needs.

``ParallelDims`` holds the degrees (world = tensor parallel x data parallel, or sequence parallel
x data parallel), this process's ranks and the process groups. Tensor-parallel groups are ``tp``
consecutive ranks; the ranks of a tensor-parallel group train on the same batch, so counts and
metrics are summed over the data-parallel group only. Sequence-parallel groups are ``sp``
consecutive ranks too (DeepSpeed's Ulysses groups); its ranks hold the same batch and each computes
one contiguous shard of the sequence: the step's counts (taken on the whole batch) are summed over
the data-parallel group, the per-rank loss sums over the data- and sequence-parallel ranks together
(:attr:`ParallelDims.shard_sum_group`). Every function here is a collective: all ranks must call it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Optional

import torch
import torch.distributed as dist


class ParallelLayoutError(ValueError):
    """A tensor-parallel size that does not fit the world or the model; the message says which."""


@dataclass(frozen=True)
class ParallelDims:
    """world = tp x dp, or sp x dp (``tp`` and ``sp`` are not combined); ``dp_group``/``tp_group``
    None mean the whole world / no tensor parallelism; ``sp_group`` None: no sequence parallelism."""

    world: int
    rank: int
    tp: int
    dp: int
    dp_rank: int
    local_rank: int = 0
    dp_group: Optional[Any] = None
    tp_group: Optional[Any] = None
    sp: int = 1
    sp_rank: int = 0  # this rank's shard of the sequence: positions [sp_rank * T / sp, (sp_rank + 1) * T / sp)
    sp_group: Optional[Any] = None

    @classmethod
    def from_world(cls, tp: int, sp: int = 1) -> ParallelDims:
        """The layout of the initialised default process group with tensor-parallel size ``tp``
        (the groups are filled in once DeepSpeed has made them, :meth:`with_groups`) or
        sequence-parallel size ``sp``: rank r holds shard ``r % sp`` of data-parallel rank
        ``r // sp``'s batch; the data-parallel groups (one per shard index) are made here, the
        sequence-parallel group comes from DeepSpeed (:meth:`with_sequence_group`)."""
        world, rank = dist.get_world_size(), dist.get_rank()
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if tp > 1 and sp > 1:
            raise ParallelLayoutError(f"parallel.sp={sp} with parallel.tp={tp}: choose one of them")
        if world % tp:
            raise ParallelLayoutError(f"parallel.tp={tp} does not divide the world of {world} processes")
        if world % sp:
            raise ParallelLayoutError(f"parallel.sp={sp} does not divide the world of {world} processes")
        if sp == 1:
            return cls(world, rank, tp, world // tp, rank, local_rank)
        dp_group = _data_parallel_group_over_shards(world, rank, sp)
        return cls(world, rank, 1, world // sp, rank // sp, local_rank, dp_group, None, sp, rank % sp)

    def with_groups(self, dp_group: Any, tp_group: Any, dp_rank: int) -> ParallelDims:
        return dataclasses.replace(self, dp_group=dp_group, tp_group=tp_group, dp_rank=dp_rank)

    def with_sequence_group(self, sp_group: Any) -> ParallelDims:
        """This layout with its sequence-parallel group (DeepSpeed's Ulysses group: ``sp``
        consecutive ranks)."""
        ranks = dist.get_process_group_ranks(sp_group)
        first = self.rank - self.sp_rank
        if ranks != list(range(first, first + self.sp)):
            raise ParallelLayoutError(f"the sequence-parallel group of rank {self.rank} holds ranks {ranks}")
        return dataclasses.replace(self, sp_group=sp_group)

    @property
    def shard_sum_group(self) -> Optional[Any]:
        """The ranks whose per-rank sums of the loss add up to the step's: the data-parallel
        group, and under sequence parallelism every shard of it (the world, as tp = 1 there)."""
        return None if self.sp > 1 else self.dp_group

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _data_parallel_group_over_shards(world: int, rank: int, sp: int) -> Any:
    """This rank's data-parallel group under sequence parallelism: the ranks holding the same shard
    index (r % sp) of different batches. Every rank makes every group (a collective)."""
    mine = None
    for shard in range(sp):
        ranks = list(range(shard, world, sp))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = group
    return mine


def _head_counts(model_config: Any) -> tuple[Optional[int], Optional[int]]:
    """(attention heads, key-value heads) of a transformers config (its text config when it has
    one); the key-value count defaults to the attention count, None where the config has none."""
    text = getattr(model_config, "text_config", None) or model_config
    heads = getattr(text, "num_attention_heads", None)
    return heads, getattr(text, "num_key_value_heads", None) or heads


def check_head_counts(model_config: Any, tp: int) -> None:
    """Attention is split by heads: ``tp`` must divide the query and key-value head counts."""
    heads, kv_heads = _head_counts(model_config)
    for count, what in ((heads, "attention"), (kv_heads, "key-value")):
        if count is not None and count % tp:
            raise ParallelLayoutError(f"parallel.tp={tp} must divide the model's {count} {what} heads")


def sequence_head_problem(heads: Optional[int], kv_heads: Optional[int], sp: int) -> Optional[str]:
    """Why Ulysses cannot give each rank of a sequence-parallel group of ``sp`` its share of the
    heads (heads / sp query heads; kv_heads / sp key-value heads, or one replicated when sp is a
    multiple of them), or None when it can. A count of None is not checked."""
    if heads is not None and heads % sp:
        return f"parallel.sp={sp} must divide the model's {heads} attention heads"
    if kv_heads is not None and kv_heads % sp and sp % kv_heads:
        return f"parallel.sp={sp} must divide the model's {kv_heads} key-value heads or be a multiple of them"
    return None


def check_sequence_head_counts(model_config: Any, sp: int) -> None:
    """Ulysses splits attention by heads: :func:`sequence_head_problem` of the model's head counts."""
    problem = sequence_head_problem(*_head_counts(model_config), sp)
    if problem is not None:
        raise ParallelLayoutError(problem)


def sum_named(values: Mapping[str, torch.Tensor | float], device: torch.device, group: Any = None) -> dict[str, float]:
    """All-reduce (sum) named scalars over ``group`` in one collective; the sums as host floats
    (one host sync)."""
    names = sorted(values)
    packed = torch.stack([torch.as_tensor(values[name], dtype=torch.float64, device=device) for name in names])
    dist.all_reduce(packed, group=group)
    return dict(zip(names, packed.tolist()))


def sum_over(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """``tensor`` summed in place over ``group`` (None: the world) and returned, left on its
    device: no host sync. No collective with one rank (or no process group)."""
    if _several_ranks(group):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


def max_over(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """``tensor`` max-reduced in place over ``group`` (None: the world), as :func:`sum_over`."""
    if _several_ranks(group):
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return tensor


def _several_ranks(group: Any) -> bool:
    return dist.is_initialized() and dist.get_world_size(group) > 1


def barrier() -> None:
    dist.barrier()


@contextlib.contextmanager
def local_main_first(local_rank: int) -> Iterator[None]:
    """Run the body on local rank 0 first (downloads, conversions), then on the other ranks."""
    first = local_rank == 0
    if not first:
        dist.barrier()
    yield
    if first:
        dist.barrier()


def gather_vocab_shards(local: torch.Tensor, vocab_size: int, group: Any) -> torch.Tensor:
    """Full-vocabulary logits [..., V] from every tensor-parallel rank's columns [..., V_local]
    (evaluation only: training never gathers logits)."""
    sizes = [torch.zeros(1, dtype=torch.long, device=local.device) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, torch.tensor([local.shape[-1]], device=local.device), group=group)
    width = max(int(s) for s in sizes)
    padded = torch.nn.functional.pad(local.contiguous(), (0, width - local.shape[-1]))
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded, group=group)
    full = torch.cat([part[..., : int(size)] for part, size in zip(parts, sizes)], -1)
    if full.shape[-1] != vocab_size:
        raise RuntimeError(f"gathered {full.shape[-1]} logit columns, expected the vocabulary's {vocab_size}")
    return full


def destroy() -> None:
    """Tear the process group down explicitly (an implicit teardown at exit sometimes aborts)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End this process with ``code`` after tearing the process group down, without the
    interpreter's finalization. A finished gloo run can still abort in finalization ("terminate
    called without an active exception", SIGABRT, pytorch/pytorch#179291: gloo's threads holding
    tensors destroyed without the GIL) after every record was written - a finished run that torchrun
    and Slurm then report as failed; CI saw it once in a 4-rank Ulysses run. Logging and the standard
    streams are flushed first; nothing of the run is left to an exit handler."""
    destroy()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
