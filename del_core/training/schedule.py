"""What each rank trains on at each optimizer step, and the learning-rate schedule.

Both are pure functions of (seed, step): resuming at step s replays exactly the batches and learning
rates of an uninterrupted run, with no sampler state to save.

Global batch of step s (epoch e = s // steps_per_epoch): the items at positions
``[i*G, (i+1)*G)`` of the epoch's seeded permutation, i = s % steps_per_epoch, G the global batch
size. Its j-th item goes to data-parallel rank ``(j // micro) % dp`` and accumulation micro-step
``j // (micro * dp)``; so any (dp, accumulation) split of the same G covers the same items.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from del_core.engines import BatchShape
from del_core.engines.settings import OptimizerConfig


@dataclass(frozen=True)
class StepPlan:
    """Assignment of dataset items to (step, micro-step, rank)."""

    num_items: int
    global_batch: int
    micro_batch: int
    data_parallel: int
    seed: int

    def __post_init__(self) -> None:
        _ = self.shape  # ConfigError (a ValueError) unless micro_batch x data_parallel divides global_batch
        if self.num_items < self.global_batch:
            raise ValueError(
                f"the data set has {self.num_items} sequences, fewer than one global batch of {self.global_batch}"
            )

    @property
    def steps_per_epoch(self) -> int:
        """Full global batches per epoch; the last ``num_items % global_batch`` items of each
        epoch's permutation are not used in that epoch."""
        return self.num_items // self.global_batch

    @property
    def shape(self) -> BatchShape:
        return BatchShape(self.global_batch, self.micro_batch, self.data_parallel)

    @property
    def accumulation(self) -> int:
        return self.shape.accumulation

    def total_steps(self, epochs: float, max_steps: int) -> int:
        return max_steps if max_steps > 0 else max(1, math.floor(epochs * self.steps_per_epoch))

    def epoch_order(self, epoch: int) -> list[int]:
        order = list(range(self.num_items))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def global_batch_items(self, step: int) -> list[int]:
        epoch, index = divmod(step, self.steps_per_epoch)
        order = self.epoch_order(epoch)
        return order[index * self.global_batch : (index + 1) * self.global_batch]

    def micro_batches(self, step: int, rank: int) -> list[list[int]]:
        """The ``accumulation`` micro-batches (item indices) of ``rank`` at ``step``."""
        items = self.global_batch_items(step)
        per_micro_step = self.micro_batch * self.data_parallel
        return [
            items[m * per_micro_step + rank * self.micro_batch : m * per_micro_step + (rank + 1) * self.micro_batch]
            for m in range(self.accumulation)
        ]


def warmup_cosine_lr(
    step: int, total_steps: int, warmup_steps: int, peak: float = 1.0, min_ratio: float = 0.0
) -> float:
    """The project's one warm-up cosine schedule: the learning rate of step ``step`` (0-based).

    Linear warm-up over ``warmup_steps`` steps (the first step gets ``peak / warmup_steps``), then
    cosine decay from ``peak`` to ``min_ratio * peak`` at ``total_steps`` (held there after). With
    ``peak=1.0`` it is the multiplier a ``LambdaLR`` applies to the optimizer's learning rate.
    """
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def warmup_cosine(total_steps: int, warmup_ratio: float, min_ratio: float = 0.0) -> Callable[[int], float]:
    """LR multiplier of step s (0-based) for ``LambdaLR``: :func:`warmup_cosine_lr` with
    ceil(warmup_ratio * total) warm-up steps and a peak of 1."""
    warmup = math.ceil(warmup_ratio * total_steps)

    def factor(step: int) -> float:
        return warmup_cosine_lr(step, total_steps, warmup, 1.0, min_ratio)

    return factor


def lr_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float, min_ratio: float = 0.0):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, warmup_ratio, min_ratio))


def apply_optimizer_settings(scheduler: Any, optimizer: OptimizerConfig, total_steps: int) -> None:
    """After loading a checkpoint with overridden keys: the optimizer's hyperparameters and the
    learning-rate schedule as ``optimizer`` says (the checkpoint restored its own), so that the
    step after the resumed one already uses them."""
    groups = scheduler.optimizer.param_groups
    for index, group in enumerate(groups):
        group.update(initial_lr=optimizer.lr, betas=tuple(optimizer.betas), eps=optimizer.eps)
        # parameter_groups: the matrices' group (with weight decay) first, then the vectors'
        group["weight_decay"] = optimizer.weight_decay if index == 0 and len(groups) == 2 else group["weight_decay"]
    factor = warmup_cosine(total_steps, optimizer.warmup_ratio, optimizer.min_lr_ratio)
    scheduler.lr_lambdas = [factor] * len(groups)
    scheduler.base_lrs = [optimizer.lr] * len(groups)
    for group in groups:
        group["lr"] = optimizer.lr * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in groups]
