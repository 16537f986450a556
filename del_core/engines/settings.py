"""The recipe's sections an engine reads: ``parallel`` (which engine, how it shards) and
``optimizer`` (what the engine builds its optimizer from). Validated here as far as no engine is
involved; each engine refuses what it cannot run (:meth:`del_core.engines.Backend.check`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from del_core.config import ConfigError, check_at_least, check_choice


@dataclass
class OptimizerConfig:
    name: str = (
        "auto"  # auto = DeepSpeed's AdamW on GPU under DeepSpeed (fused / CPU-Adam with offload), else torch AdamW
    )
    lr: float = 5e-6
    min_lr_ratio: float = 0.0  # cosine decays to lr * min_lr_ratio
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        check_choice("optimizer", "name", self.name, ("auto", "torch", "deepspeed"))
        if not self.lr > 0 or not 0 <= self.warmup_ratio < 1 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(
                "need optimizer.lr > 0, 0 <= optimizer.warmup_ratio < 1 and 0 <= optimizer.min_lr_ratio <= 1"
            )
        if len(self.betas) != 2:
            raise ConfigError(f"optimizer.betas must be two numbers, got {self.betas}")


@dataclass
class ParallelConfig:
    tp: int = 1  # tensor-parallel group size (DeepSpeed AutoTP, vocab-parallel LM head); data parallel = world / tp
    # sequence-parallel group size (DeepSpeed Ulysses): each rank of a group computes 1/sp of every
    # sequence; data parallel = world / sp. Not with tp > 1.
    sp: int = 1
    zero_stage: int = 3
    # ZeRO-3 with optimizer and parameters in CPU memory (ds_configs/zero3_offload.json); under
    # engine=fsdp2 FSDP2's CPUOffloadPolicy (parameters, gradients and optimizer state on the CPU)
    offload: bool = False
    ds_config: Optional[str] = None  # explicit DeepSpeed JSON; overrides zero_stage/offload
    # deepspeed (ZeRO-2/3, AutoTP, Ulysses), fsdp2 (torch's fully_shard per decoder layer and the
    # root) or ddp (torch DistributedDataParallel, a whole model per rank); the engines and what
    # each refuses: del_core/engines/registry.py, docs/parallelism.md
    engine: str = "deepspeed"

    def __post_init__(self) -> None:
        check_choice("parallel", "zero_stage", self.zero_stage, (2, 3))
        check_at_least("parallel", {"tp": self.tp, "sp": self.sp}, 1)
        if self.sp > 1 and self.tp > 1:
            raise ConfigError(
                f"parallel.sp={self.sp} with parallel.tp={self.tp} is not supported: choose sequence parallelism "
                "(parallel.sp) or tensor parallelism (parallel.tp)"
            )
        if self.offload and self.zero_stage != 3:
            raise ConfigError("parallel.offload needs parallel.zero_stage=3")
        if self.ds_config is not None and not Path(self.ds_config).is_file():
            raise ConfigError(f"parallel.ds_config: {self.ds_config} does not exist")
