"""FSDP2 as the trainer's engine (``parallel.engine=fsdp2``): every decoder layer and the objective
sharded over the data-parallel ranks (:mod:`.engine`), fp32 parameters with bf16 compute, CPU
offload with ``parallel.offload``, checkpoints that load at another world size."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Optional

import torch

from del_core.engines.interface import Backend, BatchShape, BuiltEngine, EngineSettings, SchedulerFactory, refuse
from del_core.engines.optimizer import torch_optimizer
from del_core.engines.runtime import Runtime
from del_core.parallel import ParallelDims, init_process_group

from .engine import FSDP2Engine, FSDP2Settings, decoder_layers, initialize


class FSDP2Backend(Backend):
    """A run's FSDP2 engine, from torch's process group to the gathered full weights."""

    name = "fsdp2"
    reshards_checkpoints = True

    @staticmethod
    def check(values: Mapping[str, Any]) -> None:
        """What FSDP2 does not combine with (yet)."""
        refuse(
            "fsdp2",
            {
                "parallel.tp": (
                    values["parallel.tp"],
                    values["parallel.tp"] > 1,
                    "tensor parallelism is DeepSpeed's AutoTP",
                ),
                "parallel.sp": (
                    values["parallel.sp"],
                    values["parallel.sp"] > 1,
                    "sequence parallelism is DeepSpeed's Ulysses",
                ),
                "parallel.ds_config": (
                    values["parallel.ds_config"],
                    values["parallel.ds_config"] is not None,
                    "a DeepSpeed config has no meaning for FSDP2",
                ),
                "parallel.zero_stage": (
                    values["parallel.zero_stage"],
                    values["parallel.zero_stage"] != 3,
                    "FSDP2 shards parameters, gradients and optimizer state",
                ),
                "lora.enabled": (values["lora.enabled"], values["lora.enabled"], "use deepspeed or ddp"),
                "optimizer.name": (
                    values["optimizer.name"],
                    values["optimizer.name"] == "deepspeed",
                    "use torch or auto",
                ),
            },
        )

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        self._engine: Optional[FSDP2Engine] = None

    def init_process(self, on_gpu: bool) -> None:
        init_process_group(on_gpu)

    def configure(self, dims: ParallelDims, runtime: Runtime, shape: BatchShape) -> None:
        self.dims, self.runtime = dims, runtime
        self.fsdp2_settings = FSDP2Settings(
            bf16=runtime.bf16,
            offload=self.settings.parallel.offload,
            accumulation=shape.accumulation,
            grad_clip=self.settings.optimizer.grad_clip,
        )

    def describe(self) -> str:
        return f"FSDP2{' + CPU offload' if self.settings.parallel.offload else ''}"

    @property
    def gradient_divisor(self) -> int:
        """FSDP2's reduce-scatter averages over the data-parallel ranks."""
        return self.dims.dp

    def model_dtype(self) -> torch.dtype:
        """fp32 parameters: FSDP2 computes in bf16 through its MixedPrecisionPolicy."""
        return torch.float32

    def build(
        self, objective: torch.nn.Module, make_scheduler: SchedulerFactory, log: Callable[[str], None]
    ) -> BuiltEngine:
        """Each decoder layer and the objective (root: embedding, final norm, LM head, and the
        loss inside its forward) sharded over the ``dims.dp`` ranks; torch AdamW over the shards."""
        settings = self.fsdp2_settings
        make_optimizer = functools.partial(torch_optimizer, optimizer=self.settings.optimizer)
        self._engine = initialize(objective, settings, self.runtime.device, make_optimizer, make_scheduler)
        log(
            f"[fsdp2] {len(decoder_layers(objective.lm))} decoder layers + the root sharded over {self.dims.dp} "
            f"rank(s); {'bf16 compute on fp32 parameters' if settings.bf16 else 'fp32'}"
            f"{', CPU offload' if settings.offload else ''}; accumulation {settings.accumulation}"
        )
        return BuiltEngine(self._engine, self._engine.scheduler, self.dims)

    def evaluating(self) -> AbstractContextManager:
        return self._engine.evaluating()

    def synced_generation(self, world: int) -> bool:
        return world > 1

    def full_state(self, is_main: bool) -> Optional[dict]:
        return self._engine.full_state_dict(is_main)
