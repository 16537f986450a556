"""torch's DistributedDataParallel as the trainer's engine (``parallel.engine=ddp``), for models
that fit one device: every rank holds the whole objective (model and loss), its fp32 parameters
and its optimizer state, and the gradients are all-reduced (averaged over the ranks) in buckets
during the backward of each optimizer step's last micro-batch; the micro-batches before it
accumulate locally (``no_sync``). With bf16 the forward and backward compute under
``torch.autocast`` on the fp32 parameters, and the gradients are reduced in fp32.

:class:`DDPEngine` is driven like DeepSpeed's engine (:class:`del_core.engines.Engine`).
Checkpoints are three ``torch.save`` files of rank 0 (the objective's weights - with LoRA its
trainable ones only -, the optimizer, the LR schedule): every rank holds the same state, so a
checkpoint loads at any world size. Importing this module does not import the DDP wrapper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from del_core.parallel import ParallelDims, init_process_group

from .interface import Backend, BatchShape, BuiltEngine, EngineSettings, SchedulerFactory, refuse
from .optimizer import torch_optimizer
from .runtime import Runtime

MODEL, OPTIMIZER, ENGINE_STATE = "model.pt", "optimizer.pt", "engine_state.pt"  # a checkpoint's files


@dataclass(frozen=True)
class DDPSettings:
    """``accumulation`` micro-batches per optimizer step; ``grad_clip`` the gradients' global L2
    norm bound (0: not clipped, still measured); ``autocast``: the compute dtype under
    ``torch.autocast`` (None: the parameters' fp32); ``is_main``: this rank writes checkpoints."""

    accumulation: int
    grad_clip: float
    autocast: Optional[torch.dtype]
    is_main: bool


class DDPEngine:
    """The replicated objective (``module``: the DDP wrapper of ``objective``) with its optimizer
    and LR schedule, driven like DeepSpeed's engine."""

    def __init__(
        self,
        module: torch.nn.Module,
        objective: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        settings: DDPSettings,
    ):
        self.module = module
        self.objective = objective
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.settings = settings
        self.micro_step = 0  # micro-batches of the current optimizer step done
        self._grad_norm: Optional[torch.Tensor] = None
        self._device_type = next(objective.parameters()).device.type

    def __call__(self, **inputs: Any) -> Any:
        """The objective on one micro-batch; its backward all-reduces the gradients only at the
        step's last micro-batch (DDP decides that at the forward)."""
        last = self.micro_step + 1 == self.settings.accumulation
        sync = contextlib.nullcontext() if last else self.module.no_sync()
        autocast = self.settings.autocast
        precision = torch.autocast(self._device_type, dtype=autocast) if autocast else contextlib.nullcontext()
        with sync, precision:
            return self.module(**inputs)

    def backward(self, loss: torch.Tensor, scale_wrt_gas: bool = False) -> None:
        """``loss.backward()``. ``scale_wrt_gas`` is DeepSpeed's keyword: the trainer scales the
        loss itself."""
        loss.backward()

    def step(self) -> None:
        """After each micro-batch: at the step's last one, clip (the global norm: every rank holds
        the all-reduced gradients), step the optimizer and the LR schedule, zero the gradients."""
        self.micro_step += 1
        if self.micro_step < self.settings.accumulation:
            return
        self.micro_step = 0
        params = [p for p in self.objective.parameters() if p.grad is not None]
        bound = self.settings.grad_clip if self.settings.grad_clip > 0 else float("inf")
        self._grad_norm = torch.nn.utils.clip_grad_norm_(params, bound)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def get_global_grad_norm(self) -> Optional[torch.Tensor]:
        """The last optimizer step's gradient norm before clipping (0-dim, not read), or None."""
        return self._grad_norm

    def save_checkpoint(
        self, save_dir: str, tag: str, save_latest: bool = False, exclude_frozen_parameters: bool = False
    ) -> None:
        """Write ``save_dir/tag`` (every rank makes the folder, rank 0 the files); with
        ``exclude_frozen_parameters`` the weights that train only. The other keywords are
        DeepSpeed's (no ``latest`` file is written)."""
        path = Path(save_dir) / tag
        path.mkdir(parents=True, exist_ok=True)
        if not self.settings.is_main:
            return
        weights = self.objective.state_dict()
        if exclude_frozen_parameters:
            trainable = {name for name, p in self.objective.named_parameters() if p.requires_grad}
            weights = {k: v for k, v in weights.items() if k in trainable}
        torch.save(weights, path / MODEL)
        torch.save(self.optimizer.state_dict(), path / OPTIMIZER)
        torch.save({"scheduler": self.scheduler.state_dict()}, path / ENGINE_STATE)

    def load_checkpoint(self, load_dir: str, tag: str, load_module_strict: bool = True) -> tuple[str, dict]:
        """Load ``load_dir/tag`` written by :meth:`save_checkpoint` at any world size; (the path,
        {}) as DeepSpeed returns it."""
        path = Path(load_dir) / tag
        device = next(self.objective.parameters()).device
        self.objective.load_state_dict(torch.load(path / MODEL, map_location=device), strict=load_module_strict)
        self.optimizer.load_state_dict(torch.load(path / OPTIMIZER, map_location=device))
        self.scheduler.load_state_dict(torch.load(path / ENGINE_STATE, weights_only=False)["scheduler"])
        self.micro_step = 0
        return str(path), {}


class DDPBackend(Backend):
    """A run's DDP engine, from torch's process group to rank 0's whole weights."""

    name = "ddp"
    reshards_checkpoints = True

    @staticmethod
    def check(values: Mapping[str, Any]) -> None:
        """DDP replicates a whole model per rank: no sharding keys."""
        refuse(
            "ddp",
            {
                "parallel.tp": (values["parallel.tp"], values["parallel.tp"] > 1, "tensor parallelism is DeepSpeed's"),
                "parallel.sp": (
                    values["parallel.sp"],
                    values["parallel.sp"] > 1,
                    "sequence parallelism is DeepSpeed's",
                ),
                "parallel.ds_config": (
                    values["parallel.ds_config"],
                    values["parallel.ds_config"] is not None,
                    "a DeepSpeed config has no meaning for DDP",
                ),
                "parallel.zero_stage": (
                    values["parallel.zero_stage"],
                    values["parallel.zero_stage"] != 3,
                    "ZeRO stages are DeepSpeed's; DDP keeps a whole replica per rank",
                ),
                "parallel.offload": (values["parallel.offload"], values["parallel.offload"], "use deepspeed or fsdp2"),
                "optimizer.name": (
                    values["optimizer.name"],
                    values["optimizer.name"] == "deepspeed",
                    "use torch or auto",
                ),
            },
        )

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        self._engine: Optional[DDPEngine] = None

    def init_process(self, on_gpu: bool) -> None:
        init_process_group(on_gpu)

    def configure(self, dims: ParallelDims, runtime: Runtime, shape: BatchShape) -> None:
        self.dims, self.runtime = dims, runtime
        self.ddp_settings = DDPSettings(
            accumulation=shape.accumulation,
            grad_clip=self.settings.optimizer.grad_clip,
            autocast=torch.bfloat16 if runtime.bf16 else None,
            is_main=dims.is_main,
        )

    def describe(self) -> str:
        return "DDP (whole replicas)"

    @property
    def gradient_divisor(self) -> int:
        """DDP averages the all-reduced gradients over the data-parallel ranks."""
        return self.dims.dp

    def model_dtype(self) -> torch.dtype:
        """fp32 parameters: bf16 runs compute under autocast."""
        return torch.float32

    def build(
        self, objective: torch.nn.Module, make_scheduler: SchedulerFactory, log: Callable[[str], None]
    ) -> BuiltEngine:
        """``objective`` on this rank's device inside DDP; torch AdamW over its parameters."""
        from torch.nn.parallel import DistributedDataParallel

        device = self.runtime.device
        objective.to(device)
        module = DistributedDataParallel(objective, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch_optimizer(objective, self.settings.optimizer)
        self._engine = DDPEngine(module, objective, optimizer, make_scheduler(optimizer), self.ddp_settings)
        settings = self.ddp_settings
        precision = "bf16 autocast on fp32 parameters" if settings.autocast else "fp32"
        log(
            f"[ddp] whole objective on each of {self.dims.dp} rank(s); {precision}; "
            f"accumulation {settings.accumulation}"
        )
        return BuiltEngine(self._engine, self._engine.scheduler, self.dims)

    def evaluating(self) -> AbstractContextManager:
        """Every rank holds the whole model: nothing to gather."""
        return contextlib.nullcontext()

    def synced_generation(self, world: int) -> bool:
        return False

    def full_state(self, is_main: bool) -> Optional[dict]:
        return self._engine.objective.state_dict() if is_main else None
