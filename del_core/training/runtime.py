"""Where a run's process computes: the device, the precision and the optimizer kind, decided once
from the config and the machine, and the ``[run]`` line that says how the ranks share the work."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Optional

import torch

from del_core.parallel import ParallelDims
from del_core.training.config import TrainConfig
from del_core.training.deepspeed_config import accumulation_steps


@dataclass(frozen=True)
class Runtime:
    """Where and in what precision the run computes, decided once from the config and the machine."""

    on_gpu: bool
    device: torch.device
    dtype: torch.dtype  # bf16 on GPU (precision auto), fp32 on CPU
    use_ds_optimizer: bool  # DeepSpeed's AdamW (GPU default under DeepSpeed) or torch AdamW (CPU, FSDP2)

    @classmethod
    def detect(cls, config: TrainConfig) -> Runtime:
        on_gpu = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        bf16 = config.model.precision == "bf16" or (config.model.precision == "auto" and on_gpu)
        use_ds = config.optimizer.name == "deepspeed" or (
            config.optimizer.name == "auto" and on_gpu and config.parallel.engine == "deepspeed"
        )
        return cls(on_gpu, device, torch.bfloat16 if bf16 else torch.float32, use_ds)

    @property
    def bf16(self) -> bool:
        return self.dtype == torch.bfloat16

    def peak_memory_gb(self) -> float:
        if self.on_gpu:
            return torch.cuda.max_memory_allocated() / 1e9
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def layout_line(config: TrainConfig, dims: ParallelDims, runtime: Runtime, ds_config: Optional[dict]) -> str:
    """The ``[run]`` console line: ranks and device, how they share the work, the engine's
    sharding (``ds_config``: DeepSpeed's, None under FSDP2) and precision, and how the global
    batch splits into micro-batches, accumulation and data parallel."""
    run = config.run
    return (
        f"[run] {dims.world} rank(s) on {'GPU' if runtime.on_gpu else 'CPU'} = {_model_parallel(dims)} "
        f"x data parallel {dims.dp}, {_sharding(config, ds_config)}, {'bf16' if runtime.bf16 else 'fp32'}; "
        f"global batch {run.global_batch_size} = micro {run.micro_batch_size} x "
        f"accumulation {accumulation_steps(config, dims.dp)} x {dims.dp} data-parallel rank(s)"
    )


def _sharding(config: TrainConfig, ds_config: Optional[dict]) -> str:
    """The engine's sharding for the [run] line: the ZeRO stage, or FSDP2; with offload."""
    if ds_config is None:
        return f"FSDP2{' + CPU offload' if config.parallel.offload else ''}"
    zero = ds_config["zero_optimization"]
    return f"ZeRO-{zero.get('stage')}{' + offload' if 'offload_optimizer' in zero else ''}"


def _model_parallel(dims: ParallelDims) -> str:
    """How the ranks of one data-parallel rank share its work, for the [run] line."""
    if dims.sp > 1:
        return f"sequence parallel {dims.sp} (Ulysses: each rank 1/{dims.sp} of every sequence)"
    return f"tensor parallel {dims.tp}"
