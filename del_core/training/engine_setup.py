"""The engine of a run: DeepSpeed initialised on the objective (the optimizer, the learning-rate
schedule, the Ulysses groups), AutoTP's vocab-parallel LM head handed to the loss, and this run's
optimizer settings put back after a resume that overrides them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from del_core.engines import deepspeed as ds
from del_core.parallel import ParallelDims
from del_core.training.config import OptimizerConfig, TrainConfig
from del_core.training.objective import CausalLMObjective
from del_core.training.optimizer import initialize_engine
from del_core.training.runtime import Runtime
from del_core.training.schedule import warmup_cosine


@dataclass(frozen=True)
class TrainingEngine:
    """DeepSpeed's engine around the objective, its LR scheduler, and the layout it made."""

    engine: Any
    scheduler: Any  # torch LambdaLR over the engine's optimizer
    dims: ParallelDims  # with AutoTP's data- and tensor-parallel groups under parallel.tp > 1


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
    set-up, else None); under tensor parallelism the loss then computes on this rank's head columns."""
    engine, scheduler = initialize_engine(
        objective, config, ds_config, total_steps, runtime.use_ds_optimizer, mpu=sequence_groups
    )
    if dims.tp > 1:
        dims = _attach_tensor_parallel(objective, dims, log)
    return TrainingEngine(engine, scheduler, dims)


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
