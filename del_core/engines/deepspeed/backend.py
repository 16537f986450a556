"""DeepSpeed as the trainer's engine (``parallel.engine=deepspeed``, the default): ZeRO-2/3 with
optional CPU offload, AutoTP tensor parallelism (``parallel.tp``) and Ulysses sequence parallelism
(``parallel.sp``), over DeepSpeed's own engine and checkpoints (which load at the world size that
wrote them)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Optional

import torch

from del_core.engines.interface import Backend, BatchShape, BuiltEngine, EngineSettings, SchedulerFactory
from del_core.engines.optimizer import parameter_groups, torch_optimizer
from del_core.engines.runtime import Runtime
from del_core.parallel import ParallelDims, check_sequence_head_counts

from . import glue
from .config import build_ds_config


class DeepSpeedBackend(Backend):
    """A run's DeepSpeed engine, from ``deepspeed.init_distributed`` to the consolidated weights."""

    name = "deepspeed"
    reshards_checkpoints = False

    @staticmethod
    def check(values: Mapping[str, Any]) -> None:
        """DeepSpeed runs every combination the configuration itself accepts."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        self.ds_config: dict = {}  # DeepSpeed's filled config, from configure() on
        self._partitioning = None  # transformers' HfDeepSpeedConfig, alive while the model lives
        self._sequence_groups = None  # DeepSpeed's Ulysses groups (mpu) with parallel.sp > 1
        self._engine: Any = None
        self._objective: Optional[torch.nn.Module] = None

    def init_process(self, on_gpu: bool) -> None:
        glue.init_distributed(on_gpu)

    def configure(self, dims: ParallelDims, runtime: Runtime, shape: BatchShape) -> None:
        """DeepSpeed's config for ``shape``; its AdamW on GPU unless ``optimizer.name=torch``."""
        optimizer = self.settings.optimizer
        self.dims, self.runtime = dims, runtime
        self.use_ds_optimizer = optimizer.name == "deepspeed" or (optimizer.name == "auto" and runtime.on_gpu)
        self.ds_config = build_ds_config(self.settings.parallel, optimizer, shape, runtime.bf16, self.use_ds_optimizer)
        self._divisor = glue.gradient_divisor(self.ds_config, dims.dp, dims.sp)

    @property
    def zero3(self) -> bool:
        return self.ds_config["zero_optimization"].get("stage") == 3

    def describe(self) -> str:
        zero = self.ds_config["zero_optimization"]
        return f"ZeRO-{zero.get('stage')}{' + offload' if 'offload_optimizer' in zero else ''}"

    @property
    def gradient_divisor(self) -> int:
        return self._divisor

    def model_dtype(self) -> torch.dtype:
        return self.runtime.dtype

    def begin_model_loading(self) -> None:
        self._partitioning = glue.partitioning_context(self.ds_config, self.dims.tp)

    def wrap_model(
        self, model: torch.nn.Module, attn: str, micro_batch_size: int, log: Callable[[str], None]
    ) -> ParallelDims:
        """Ulysses around the model's attention with ``parallel.sp`` > 1 (its groups kept for
        :meth:`build`)."""
        dims = self.dims
        if dims.sp == 1:
            return dims
        check_sequence_head_counts(model.config, dims.sp)
        self._sequence_groups = glue.register_sequence_parallel(model, attn, dims.sp, micro_batch_size)
        self.dims = glue.sequence_parallel_dims(dims, self._sequence_groups)
        log(
            f"[sp] Ulysses over {dims.sp} ranks: number spans and counts from whole sequences, each rank "
            f"trains positions [r*T/{dims.sp}, (r+1)*T/{dims.sp}) (T padded to a multiple of {dims.sp})"
        )
        return self.dims

    def head_gather(self) -> Optional[Callable[[list[torch.nn.Parameter]], AbstractContextManager]]:
        """ZeRO-3 partitions the weights while loading: gathered on request."""
        return functools.partial(glue.gathered, enabled=True) if self.zero3 else None

    def attach_objective(self, objective: torch.nn.Module) -> None:
        """The chunked loss under ZeRO-3 reads the head's weight outside the head: registered as
        the objective's external parameter (under AutoTP in :meth:`build`, where the head is made)."""
        if self.zero3 and objective.path.reads_head_weight and self.dims.tp == 1:
            glue.register_lm_head_weight(objective)

    def build(
        self, objective: torch.nn.Module, make_scheduler: SchedulerFactory, log: Callable[[str], None]
    ) -> BuiltEngine:
        """``deepspeed.initialize`` with DeepSpeed's AdamW or torch's (:func:`torch_optimizer`);
        under tensor parallelism the loss then computes on this rank's head columns."""
        optimizer = self.settings.optimizer
        groups = parameter_groups(objective, optimizer.weight_decay)
        torch_adamw = None if self.use_ds_optimizer else torch_optimizer(objective, optimizer)
        self._engine, scheduler = glue.initialize(
            objective, self.ds_config, groups, torch_adamw, make_scheduler, mpu=self._sequence_groups
        )
        self._objective = objective
        if self.dims.tp > 1:
            self.dims = _attach_tensor_parallel(objective, self.dims, log)
        return BuiltEngine(self._engine, scheduler, self.dims)

    def evaluating(self) -> AbstractContextManager:
        return contextlib.nullcontext()

    def synced_generation(self, world: int) -> bool:
        return self.zero3 and world > 1

    def full_state(self, is_main: bool) -> Optional[dict]:
        gather = self.zero3 or self.dims.tp > 1
        return glue.full_state_dict(self._engine, self._objective, gather, is_main)


def _attach_tensor_parallel(objective: Any, dims: ParallelDims, log: Callable[[str], None]) -> ParallelDims:
    """After AutoTP sharded the model: point the loss at the vocab-parallel head's columns; ``dims``
    with DeepSpeed's data- and tensor-parallel groups."""
    dims = glue.tensor_parallel_dims(dims)
    vocab_slice = glue.vocab_slice_of_head(objective, dims)
    objective.use_vocab_parallel_head(vocab_slice, dims.tp_group)
    objective.set_loss_fn(objective.loss_fn.for_vocab_slice(vocab_slice))
    log(
        f"[tp] LM head columns [{vocab_slice.start}, {vocab_slice.end}) of {vocab_slice.vocab_size} on rank "
        f"{dims.rank}; the loss all-reduces digit-restricted partial sums over the tensor-parallel group"
    )
    return dims
