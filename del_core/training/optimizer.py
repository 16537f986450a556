"""The optimizer of a run: parameter groups, torch's AdamW (the CPU default) or the engine's own,
and the warm-up cosine schedule, handed to the engine (:func:`del_core.engines.deepspeed.initialize`)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from del_core.engines import deepspeed as ds
from del_core.training.config import TrainConfig
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


def initialize_engine(
    objective: torch.nn.Module,
    config: TrainConfig,
    ds_config: dict,
    total_steps: int,
    use_ds_optimizer: bool,
    mpu: Any = None,
) -> tuple[Any, Any]:
    """(engine, LR scheduler): DeepSpeed's AdamW when ``use_ds_optimizer``, torch AdamW
    (:func:`torch_adamw`) otherwise, and the warm-up cosine schedule of
    :mod:`del_core.training.schedule`; ``mpu``: the Ulysses groups (None without sequence parallelism)."""
    opt = config.optimizer
    groups = parameter_groups(objective, opt.weight_decay)
    optimizer = None if use_ds_optimizer else torch_adamw(groups, opt.lr, tuple(opt.betas), opt.eps)
    schedule = functools.partial(
        lr_scheduler, total_steps=total_steps, warmup_ratio=opt.warmup_ratio, min_ratio=opt.min_lr_ratio
    )
    return ds.initialize(objective, ds_config, groups, optimizer, schedule, mpu=mpu)
