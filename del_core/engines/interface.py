"""What the trainer asks of an engine: :class:`Backend`, the engine's whole life in a run, from
the process group to the exported weights; :class:`Engine`, what it drives per micro-batch.

A run holds one backend (:func:`del_core.engines.registry.backend_type` maps ``parallel.engine``
to its class), made from :class:`EngineSettings` before the process group exists, and calls it in
this order: :meth:`Backend.init_process`, :meth:`Backend.configure` (the world's layout is
known), :meth:`Backend.model_dtype` / :meth:`Backend.begin_model_loading` /
:meth:`Backend.wrap_model` around loading the model, :meth:`Backend.head_gather` and
:meth:`Backend.attach_objective` around the loss, :meth:`Backend.build` (engine, optimizer, LR
schedule), then per step the :class:`Engine`, around evaluation :meth:`Backend.evaluating`, and at
the end :meth:`Backend.full_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Protocol, Union

import torch

from del_core.config import ConfigError
from del_core.parallel import ParallelDims

from .runtime import Runtime
from .settings import OptimizerConfig, ParallelConfig

# Builds the learning-rate schedule (a torch LRScheduler) on the optimizer the engine made.
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


class Engine(Protocol):
    """The per-step surface: DeepSpeed's ``DeepSpeedEngine`` has these methods under these names,
    :class:`del_core.engines.fsdp2.FSDP2Engine` and :class:`del_core.engines.ddp.DDPEngine`
    implement them.

    Per micro-batch: ``engine(**inputs)`` runs the objective, ``backward(loss,
    scale_wrt_gas=False)`` its backward (the loss already scaled by the trainer), ``step()``
    counts the micro-batch and, after the optimizer step's last one, clips, steps the optimizer
    and the LR schedule. ``get_global_grad_norm()``: the last optimizer step's norm before
    clipping (a tensor not read yet, a float, or None). ``save_checkpoint`` /
    ``load_checkpoint`` write and read ``dir/tag`` (collective).
    """

    def __call__(self, **inputs: Any) -> dict[str, torch.Tensor]: ...

    def backward(self, loss: torch.Tensor, scale_wrt_gas: bool = ...) -> Any: ...

    def step(self) -> None: ...

    def get_global_grad_norm(self) -> Union[torch.Tensor, float, None]: ...

    def save_checkpoint(
        self, save_dir: str, tag: str, save_latest: bool = ..., exclude_frozen_parameters: bool = ...
    ) -> Any: ...

    def load_checkpoint(self, load_dir: str, tag: str, load_module_strict: bool = ...) -> tuple[Optional[str], Any]: ...


@dataclass(frozen=True)
class BatchShape:
    """How a global batch splits: ``global_batch = micro_batch x accumulation x data_parallel``
    (in sequences). The one place the accumulation count is computed."""

    global_batch: int
    micro_batch: int
    data_parallel: int

    def __post_init__(self) -> None:
        if self.global_batch % (self.micro_batch * self.data_parallel):
            raise ConfigError(
                f"run.global_batch_size {self.global_batch} is not divisible by run.micro_batch_size "
                f"{self.micro_batch} x {self.data_parallel} data-parallel ranks"
            )

    @property
    def accumulation(self) -> int:
        """Micro-batches per rank and optimizer step."""
        return self.global_batch // (self.micro_batch * self.data_parallel)


@dataclass(frozen=True)
class EngineSettings:
    """What an engine reads of the recipe: its sections and whether LoRA adapters train (the base
    weights frozen). How the loss reads the model is the objective's (``objective.path``)."""

    parallel: ParallelConfig
    optimizer: OptimizerConfig
    lora: bool


@dataclass(frozen=True)
class BuiltEngine:
    """The engine around the objective, its LR schedule (a torch ``LambdaLR`` over the engine's
    optimizer) and the layout it made (AutoTP's groups under DeepSpeed with ``parallel.tp`` > 1)."""

    engine: Engine
    scheduler: Any
    dims: ParallelDims


class Backend(Protocol):
    """An engine's whole life in a run (see the module docstring for the call order).

    ``name`` is its ``parallel.engine`` value; ``reshards_checkpoints``: whether its checkpoints
    load at another world size (the run identity then leaves the world size out).
    """

    name: ClassVar[str]
    reshards_checkpoints: ClassVar[bool]
    dims: ParallelDims  # the layout, from configure() on (with the groups the engine made)
    runtime: Runtime

    @staticmethod
    def check(values: Mapping[str, Any]) -> None:
        """ConfigError naming the key of the first combination this engine cannot run;
        ``values``: the recipe by dotted key (:func:`del_core.config.dotted_values`). Runs while
        the configuration is read, before anything loads."""

    def __init__(self, settings: EngineSettings) -> None: ...

    def init_process(self, on_gpu: bool) -> None:
        """The process group (nccl on GPU, gloo on CPU); one process without a launcher."""

    def configure(self, dims: ParallelDims, runtime: Runtime, shape: BatchShape) -> None:
        """The layout is known: settle what depends on it (DeepSpeed's filled config)."""

    def describe(self) -> str:
        """How the engine shares the model, for the ``[run]`` line (``ZeRO-3 + offload``)."""

    @property
    def gradient_divisor(self) -> int:
        """The rank count the engine divides the summed gradients by: the trainer multiplies
        each loss by it, so that the update follows the plain sum over ranks and micro-batches."""

    def model_dtype(self) -> torch.dtype:
        """The dtype the model's parameters are loaded in."""

    def begin_model_loading(self) -> None:
        """Called before ``from_pretrained`` (ZeRO-3 partitions while loading; the backend keeps
        what makes it so alive with the model). Nothing by default."""

    def wrap_model(
        self, model: torch.nn.Module, attn: str, micro_batch_size: int, log: Callable[[str], None]
    ) -> ParallelDims:
        """After loading: wrap the model for the layout (Ulysses attention); the layout with the
        groups that made. By default the model stays as it is."""
        return self.dims

    def head_gather(self) -> Optional[Callable[[list[torch.nn.Parameter]], AbstractContextManager]]:
        """A context that holds the given (partitioned) parameters whole, for reading the LM-head
        weight outside the engine's forward; None (the default) when they are whole already."""
        return None

    def attach_objective(self, objective: torch.nn.Module) -> None:
        """Before :meth:`build`: what the objective's forward reads beyond its own modules' weights
        (ZeRO-3's external LM-head weight on the chunked path). Nothing by default."""

    def build(
        self, objective: torch.nn.Module, make_scheduler: SchedulerFactory, log: Callable[[str], None]
    ) -> BuiltEngine:
        """The engine around ``objective`` with its optimizer and LR schedule. Collective."""

    def evaluating(self) -> AbstractContextManager:
        """The context in which evaluation may call ``objective.lm`` directly. Collective."""

    def synced_generation(self, world: int) -> bool:
        """Whether every rank must run every generation step (the ranks gather parameters)."""

    def full_state(self, is_main: bool) -> Optional[dict]:
        """The objective's full weights on rank 0, keyed like its ``state_dict``; None elsewhere.
        Collective."""


def refuse(engine: str, refusals: Mapping[str, tuple[Any, bool, str]]) -> None:
    """ConfigError for the first ``key: (value, refused, why)`` that is refused, naming the key,
    its value and ``parallel.engine=engine``."""
    for key, (value, refused, why) in refusals.items():
        if refused:
            shown = str(value).lower() if isinstance(value, bool) else value
            raise ConfigError(f"{key}={shown} is not supported with parallel.engine={engine} ({why})")
