"""The optimizer of a run: parameter groups, torch's AdamW (the CPU and FSDP2 default) or
DeepSpeed's own, and the warm-up cosine schedule, handed to the engine
(:func:`del_core.engines.deepspeed.initialize`, :func:`del_core.engines.fsdp2.initialize`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from del_core.engines import deepspeed as ds
from del_core.engines import fsdp2
from del_core.engines.fsdp2 import FSDP2Engine, FSDP2Settings
from del_core.training.config import TrainConfig
from del_core.training.deepspeed_config import accumulation_steps
from del_core.training.runtime import Runtime
from del_core.training.schedule import lr_scheduler


def parameter_groups(objective: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Trainable parameters: matrices with ``weight_decay``, vectors (norms, biases) without."""
    params = [p for p in objective.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


# The devices torch has a fused AdamW kernel for (torch >= 2.4): transformers.Trainer's default
# optimizer ("adamw_torch_fused") uses it.
FUSED_ADAMW_DEVICES = ("cpu", "cuda")


def torch_adamw(groups: list[dict], lr: float, betas: tuple[float, float], eps: float) -> torch.optim.AdamW:
    """torch's AdamW over ``groups``, fused (one pass over each tensor, no full-size temporaries)
    when every parameter lies on a device with the fused kernel, else torch's default for-loop.

    On CPU the fused step of a 135M-parameter model takes about a fifth of the for-loop's time and
    none of its temporaries (the for-loop holds two fp32 copies of the largest group at its peak).
    The update is AdamW either way; the kernels may round differently in the last bit.
    """
    devices = {p.device.type for group in groups for p in group["params"]}
    fused = bool(devices) and devices <= set(FUSED_ADAMW_DEVICES)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def schedule_factory(config: TrainConfig, total_steps: int) -> Callable[[torch.optim.Optimizer], Any]:
    """Builds the warm-up cosine schedule of :mod:`del_core.training.schedule` on an optimizer."""
    opt = config.optimizer
    return functools.partial(
        lr_scheduler, total_steps=total_steps, warmup_ratio=opt.warmup_ratio, min_ratio=opt.min_lr_ratio
    )


def torch_optimizer(objective: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """torch AdamW (:func:`torch_adamw`) over ``objective``'s parameter groups."""
    opt = config.optimizer
    return torch_adamw(parameter_groups(objective, opt.weight_decay), opt.lr, tuple(opt.betas), opt.eps)


def initialize_engine(
    objective: torch.nn.Module,
    config: TrainConfig,
    ds_config: dict,
    total_steps: int,
    use_ds_optimizer: bool,
    mpu: Any = None,
) -> tuple[Any, Any]:
    """(engine, LR scheduler) under DeepSpeed: DeepSpeed's AdamW when ``use_ds_optimizer``, torch
    AdamW (:func:`torch_adamw`) otherwise, and the warm-up cosine schedule of
    :mod:`del_core.training.schedule`; ``mpu``: the Ulysses groups (None without sequence parallelism)."""
    groups = parameter_groups(objective, config.optimizer.weight_decay)
    optimizer = None if use_ds_optimizer else torch_optimizer(objective, config)
    return ds.initialize(objective, ds_config, groups, optimizer, schedule_factory(config, total_steps), mpu=mpu)


def initialize_fsdp2_engine(
    objective: torch.nn.Module, config: TrainConfig, total_steps: int, runtime: Runtime, dp: int
) -> FSDP2Engine:
    """The objective sharded by FSDP2 over ``dp`` ranks with torch AdamW over the sharded
    parameters and the warm-up cosine schedule; the run's accumulation, clipping, precision and offload."""
    settings = FSDP2Settings(
        bf16=runtime.bf16,
        offload=config.parallel.offload,
        accumulation=accumulation_steps(config, dp),
        grad_clip=config.optimizer.grad_clip,
    )
    make_optimizer = functools.partial(torch_optimizer, config=config)
    return fsdp2.initialize(objective, settings, runtime.device, make_optimizer, schedule_factory(config, total_steps))
