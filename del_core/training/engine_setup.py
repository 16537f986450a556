"""The engine of a run: DeepSpeed (or FSDP2, ``parallel.engine=fsdp2``) initialised on the
objective (the optimizer, the learning-rate schedule, the Ulysses groups), AutoTP's vocab-parallel
LM head handed to the loss, and this run's optimizer settings put back after a resume that
overrides them."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Optional

from del_core.engines import Engine, fsdp2
from del_core.engines import deepspeed as ds
from del_core.parallel import ParallelDims
from del_core.training.config import OptimizerConfig, TrainConfig
from del_core.training.objective import CausalLMObjective
from del_core.training.optimizer import initialize_engine, initialize_fsdp2_engine
from del_core.training.runtime import Runtime
from del_core.training.schedule import warmup_cosine

# The full weights on rank 0 (None elsewhere), given "is this rank 0?". Collective.
FullState = Callable[[bool], Optional[dict]]


@dataclass(frozen=True)
class TrainingEngine:
    """The engine around the objective, its LR scheduler, the layout it made, and the two things
    that differ between engines beyond :class:`del_core.engines.Engine`: how the full weights are
    gathered for the export, and the context in which evaluation may call ``objective.lm``."""

    engine: Engine
    scheduler: Any  # torch LambdaLR over the engine's optimizer
    dims: ParallelDims  # with AutoTP's data- and tensor-parallel groups under parallel.tp > 1
    full_state: FullState
    evaluating: Callable[[], AbstractContextManager]


def setup_engine(
    objective: CausalLMObjective,
    config: TrainConfig,
    ds_config: dict,
    total_steps: int,
    runtime: Runtime,
    dims: ParallelDims,
    sequence_groups: Any,
    log: Callable[[str], None],
) -> TrainingEngine:
    """The engine for ``total_steps`` steps (``sequence_groups``: the Ulysses groups of the model's
    set-up, else None); under tensor parallelism the loss then computes on this rank's head
    columns. ``parallel.engine=fsdp2``: :func:`setup_fsdp2_engine` (``ds_config`` unused)."""
    if config.parallel.engine == "fsdp2":
        return setup_fsdp2_engine(objective, config, total_steps, runtime, dims, log)
    engine, scheduler = initialize_engine(
        objective, config, ds_config, total_steps, runtime.use_ds_optimizer, mpu=sequence_groups
    )
    if dims.tp > 1:
        dims = _attach_tensor_parallel(objective, dims, log)
    gather = ds_config["zero_optimization"].get("stage") == 3 or dims.tp > 1
    full_state = functools.partial(ds.full_state_dict, engine, objective, gather)
    return TrainingEngine(engine, scheduler, dims, full_state, contextlib.nullcontext)


def setup_fsdp2_engine(
    objective: CausalLMObjective,
    config: TrainConfig,
    total_steps: int,
    runtime: Runtime,
    dims: ParallelDims,
    log: Callable[[str], None],
) -> TrainingEngine:
    """FSDP2 around the objective: each decoder layer and the objective (root: embedding, final
    norm, LM head, and the loss inside its forward) sharded over the ``dims.dp`` ranks."""
    engine = initialize_fsdp2_engine(objective, config, total_steps, runtime, dims.dp)
    settings = engine.settings
    log(
        f"[fsdp2] {len(fsdp2.decoder_layers(objective.lm))} decoder layers + the root sharded over {dims.dp} "
        f"rank(s); {'bf16 compute on fp32 parameters' if settings.bf16 else 'fp32'}"
        f"{', CPU offload' if settings.offload else ''}; accumulation {settings.accumulation}"
    )
    return TrainingEngine(engine, engine.scheduler, dims, engine.full_state_dict, engine.evaluating)


def _attach_tensor_parallel(
    objective: CausalLMObjective, dims: ParallelDims, log: Callable[[str], None]
) -> ParallelDims:
    """After AutoTP sharded the model: point the loss at the vocab-parallel head's columns; ``dims``
    with DeepSpeed's data- and tensor-parallel groups."""
    dims = ds.tensor_parallel_dims(dims)
    vocab_slice = ds.vocab_slice_of_head(objective, dims)
    objective.use_vocab_parallel_head(vocab_slice, dims.tp_group)
    objective.set_loss_fn(objective.loss_fn.for_vocab_slice(vocab_slice))
    log(
        f"[tp] LM head columns [{vocab_slice.start}, {vocab_slice.end}) of {vocab_slice.vocab_size} on rank "
        f"{dims.rank}; the loss all-reduces digit-restricted partial sums over the tensor-parallel group"
    )
    return dims


def apply_optimizer_settings(scheduler: Any, optimizer: OptimizerConfig, total_steps: int) -> None:
    """After loading a checkpoint with overridden keys: the optimizer's hyperparameters and the
    learning-rate schedule as ``optimizer`` says (the checkpoint restored its own), so that the
    step after the resumed one already uses them."""
    groups = scheduler.optimizer.param_groups
    for index, group in enumerate(groups):
        group.update(initial_lr=optimizer.lr, betas=tuple(optimizer.betas), eps=optimizer.eps)
        # optimizer.parameter_groups: the matrices' group (with weight decay) first, then the vectors'
        group["weight_decay"] = optimizer.weight_decay if index == 0 and len(groups) == 2 else group["weight_decay"]
    factor = warmup_cosine(total_steps, optimizer.warmup_ratio, optimizer.min_lr_ratio)
    scheduler.lr_lambdas = [factor] * len(groups)
    scheduler.base_lrs = [optimizer.lr] * len(groups)
    for group in groups:
        group["lr"] = optimizer.lr * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in groups]
