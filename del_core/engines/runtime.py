"""Where a run's process computes: the device and the precision, decided once from the recipe's
``model.precision`` and the machine, and the ``[run]`` line that says how the ranks share the work."""

from __future__ import annotations

import resource
from dataclasses import dataclass

import torch

from del_core.parallel import ParallelDims


def rng_devices(device: torch.device) -> list[int]:
    """The CUDA devices ``torch.random.fork_rng`` forks besides the CPU: ``device``'s when it is a GPU."""
    return [device.index or 0] if device.type == "cuda" else []


@dataclass(frozen=True)
class Runtime:
    """Where and in what precision the run computes, decided once from the config and the machine."""

    on_gpu: bool
    device: torch.device
    dtype: torch.dtype  # bf16 on GPU (precision auto), fp32 on CPU

    @classmethod
    def detect(cls, precision: str) -> Runtime:
        """``precision``: the recipe's ``model.precision`` (auto: bf16 on GPU, fp32 on CPU).
        After the process group: each rank's CUDA device is set."""
        on_gpu = torch.cuda.is_available()
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        bf16 = precision == "bf16" or (precision == "auto" and on_gpu)
        return cls(on_gpu, device, torch.bfloat16 if bf16 else torch.float32)

    @property
    def bf16(self) -> bool:
        return self.dtype == torch.bfloat16

    def peak_memory_gb(self) -> float:
        if self.on_gpu:
            return torch.cuda.max_memory_allocated() / 1e9
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def layout_line(dims: ParallelDims, runtime: Runtime, accumulation: int, micro_batch: int, sharding: str) -> str:
    """The ``[run]`` console line: ranks and device, how they share the work, the engine's
    ``sharding`` (:meth:`del_core.engines.Backend.describe`) and precision, and how the global
    batch splits into micro-batches, accumulation and data parallel."""
    global_batch = micro_batch * accumulation * dims.dp
    return (
        f"[run] {dims.world} rank(s) on {'GPU' if runtime.on_gpu else 'CPU'} = {_model_parallel(dims)} "
        f"x data parallel {dims.dp}, {sharding}, {'bf16' if runtime.bf16 else 'fp32'}; "
        f"global batch {global_batch} = micro {micro_batch} x "
        f"accumulation {accumulation} x {dims.dp} data-parallel rank(s)"
    )


def _model_parallel(dims: ParallelDims) -> str:
    """How the ranks of one data-parallel rank share its work, for the [run] line."""
    if dims.sp > 1:
        return f"sequence parallel {dims.sp} (Ulysses: each rank 1/{dims.sp} of every sequence)"
    return f"tensor parallel {dims.tp}"
