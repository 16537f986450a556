"""The calls into DeepSpeed: the process group, the engine, ZeRO-3 parameter gathering and
external parameters, the gradient divisor, AutoTP's groups, Ulysses sequence parallelism and the
consolidated export. With :mod:`.config` and :mod:`.backend`, the only DeepSpeed code of del_core;
DeepSpeed itself is imported inside the functions, so importing this module does not import it.

The trainer's DeepSpeed engine (:class:`del_core.engines.deepspeed.DeepSpeedBackend`) and the
Trainer adapter (:mod:`del_core.integrations`) both use it. ``objective`` below is the module a trainer hands to the
engine: a causal LM ``lm`` followed by its loss, reading its loss path from ``path`` and the
LM-head weight from ``head_weight()`` (:class:`del_core.training.objective.CausalLMObjective`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, Optional, Union

import torch

from del_core.config import ConfigError
from del_core.losses.statistics import VocabSlice
from del_core.parallel import DistributedReducer, ParallelDims, single_process_environment

# Builds the learning-rate scheduler of the optimizer the engine made (DeepSpeed's or the given one).
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


def init_distributed(on_gpu: bool) -> None:
    """DeepSpeed's process group: nccl on GPU, gloo on CPU. Without a launcher, one process."""
    if not on_gpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    single_process_environment()
    import deepspeed

    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")


def partitioning_context(ds_config: dict, tp: int) -> Any:
    """transformers' ``HfDeepSpeedConfig`` for ``ds_config``: while the returned object is alive,
    ``from_pretrained`` creates ZeRO-3 parameters already partitioned. The caller keeps it."""
    from transformers.integrations import HfDeepSpeedConfig

    if tp > 1:
        # transformers refuses its weight renaming under zero.Init when the config names tensor
        # parallelism. The model is built ZeRO-3-partitioned over the world; deepspeed.initialize
        # then applies AutoTP and re-partitions over data parallel.
        ds_config = {k: v for k, v in ds_config.items() if k != "tensor_parallel"}
    return HfDeepSpeedConfig(ds_config)


@contextlib.contextmanager
def gathered(params: list[torch.nn.Parameter], enabled: bool) -> Iterator[None]:
    """Inside the block the ZeRO-3-partitioned ``params`` hold their full values (collective)."""
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, enabled=enabled):
        yield


def register_lm_head_weight(objective: torch.nn.Module) -> None:
    """The chunked loss reads the LM-head weight outside the head's own forward: ZeRO-3 must gather
    it around the objective's forward and backward."""
    register_external_weight(objective, objective.head_weight())


def register_external_weight(module: torch.nn.Module, weight: torch.nn.Parameter) -> None:
    """ZeRO-3 gathers ``weight`` (a parameter of another module) around ``module``'s forward and
    backward and hands its gradient to the partitioned gradient. ``module`` must be inside the
    module tree given to ``deepspeed.initialize`` (whose hooks do the gathering) before it runs."""
    import deepspeed

    deepspeed.zero.register_external_parameter(module, weight)


def initialize(
    objective: torch.nn.Module,
    ds_config: dict,
    parameter_groups: list[dict],
    optimizer: Optional[torch.optim.Optimizer],
    make_scheduler: SchedulerFactory,
    mpu: Any = None,
) -> tuple[Any, Any]:
    """(engine, LR scheduler) of ``objective`` under ``ds_config``: ``optimizer`` over
    ``parameter_groups``, or DeepSpeed's own (its config's) when it is None; ``make_scheduler``
    builds the schedule on the optimizer the engine uses; ``mpu``: the Ulysses groups of
    :func:`register_sequence_parallel` (None without sequence parallelism)."""
    import deepspeed

    engine, _, _, scheduler = deepspeed.initialize(
        model=objective,
        optimizer=optimizer,
        model_parameters=parameter_groups,
        lr_scheduler=make_scheduler,
        config=ds_config,
        mpu=mpu,
    )
    register_tensor_parallel_head_weight(engine, objective)
    return engine, scheduler


def parameters_partitioned() -> bool:
    """Whether the DeepSpeed config the Hugging Face Trainer runs partitions the parameters (ZeRO-3):
    then a weight read outside its module, such as the chunked loss's LM-head weight, must be
    gathered. transformers records that config globally; this asks it without importing DeepSpeed."""
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def register_tensor_parallel_head_weight(engine: Any, objective: torch.nn.Module) -> None:
    """Under AutoTP with ZeRO-3 the chunked loss reads the vocab-parallel head's weight, a parameter
    AutoTP created inside ``deepspeed.initialize`` (the head registered before it is gone) and
    ZeRO-3 partitions over data parallel: registered as the objective's external parameter, it is
    gathered (this rank's vocabulary rows, whole) around the objective's forward and backward, and
    its gradient is reduce-scattered into ZeRO-3's partitioned gradient after the backward."""
    if objective.path.reads_head_weight and engine.zero_optimization_stage() == 3 and engine.autotp_size() > 1:
        register_lm_head_weight(objective)


def register_sequence_parallel(model: Any, attn_implementation: str, sp: int, micro_batch_size: int) -> Any:
    """DeepSpeed's Ulysses around ``model``'s attention (loaded with ``attn_implementation``): each
    rank of a group of ``sp`` then runs the model on its shard of the sequence (any length, the
    same on every rank of the group, ``micro_batch_size`` rows), attention on whole sequences for
    1/sp of the heads. Returns DeepSpeed's groups object (mpu) for :func:`initialize`.

    Under SDPA the wrapped attention keeps packed examples apart
    (:func:`del_core.models.sequence_attention.packed_causal_sdpa`); flash-attention does so from
    the gathered position ids. Evaluation runs the model's unwrapped SDPA
    (:func:`del_core.models.sequence_attention.evaluation_attention`)."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from del_core.models.sequence_attention import training_attention

    core = training_attention(model, attn_implementation)
    return UlyssesSPAttentionHF.register_with_transformers(
        model, core, sp, micro_batch_size, seq_length_is_variable=True, disable_in_eval=False
    )


def gradient_divisor(ds_config: dict, dp: int, sp: int) -> int:
    """The rank count DeepSpeed divides the summed gradients by, for ``dp`` data-parallel ranks
    and sequence-parallel groups of ``sp``: the trainer multiplies each loss by it, so that the
    update follows the plain sum over ranks and micro-batches.

    Without sequence parallelism: the data-parallel ranks. Under Ulysses DeepSpeed sums over all
    dp x sp ranks; ZeRO-1/2 divide by dp (``world / sequence_parallel_size``), ZeRO-3's
    reduce-scatter by the whole dp x sp group, while its other path (``reduce_scatter: false``)
    divides by dp or by dp x sp bucket by bucket, a mix no loss scale can undo: refused.
    """
    if sp == 1:
        return dp
    zero = ds_config.get("zero_optimization", {})
    if zero.get("stage", 0) != 3:
        return dp
    if not zero.get("reduce_scatter", True):
        raise ConfigError(
            f"parallel.sp={sp} with ZeRO-3 needs zero_optimization.reduce_scatter=true in the DeepSpeed "
            "config: without it DeepSpeed averages the gradients of different buckets over different rank counts"
        )
    return dp * sp


def sequence_parallel_dims(dims: ParallelDims, mpu: Any) -> ParallelDims:
    """``dims`` with the sequence-parallel group DeepSpeed made for Ulysses."""
    return dims.with_sequence_group(mpu.get_sequence_parallel_group())


def ulysses_group() -> tuple[Any, int, int]:
    """(group, this rank's shard, shards) of the Ulysses sequence-parallel group DeepSpeed made
    (the one whose ``UlyssesSPDataLoaderAdapter`` cuts the batches)."""
    from deepspeed.utils import groups

    group = groups._get_sequence_parallel_group()
    return group, groups._get_sequence_parallel_rank(), groups._get_sequence_parallel_world_size()


def tensor_parallel_dims(dims: ParallelDims) -> ParallelDims:
    """``dims`` with the data- and tensor-parallel groups DeepSpeed made for AutoTP."""
    from deepspeed.utils import groups

    return dims.with_groups(
        groups.get_data_parallel_group(), groups.get_tensor_model_parallel_group(), groups.get_data_parallel_rank()
    )


def vocab_slice_of_head(objective: torch.nn.Module, dims: ParallelDims) -> VocabSlice:
    """This rank's LM-head columns after AutoTP made the head vocab-parallel, with a reducer that
    all-reduces the loss's digit-restricted partial sums over the tensor-parallel group."""
    head = objective.lm.get_output_embeddings()
    if not hasattr(head, "vocab_start_index"):
        raise RuntimeError(
            f"tp={dims.tp}: AutoTP did not turn the LM head into a vocab-parallel layer "
            f"({type(head).__name__}); the loss needs local logit shards"
        )
    return VocabSlice(head.vocab_start_index, head.vocab_end_index, head.vocab_size, DistributedReducer(dims.tp_group))


def full_state_dict(engine: Any, objective: torch.nn.Module, gather: bool, is_main: bool) -> Optional[dict]:
    """The full model weights on rank 0 (None elsewhere). Collective when ``gather``.

    With ZeRO-3 partitions or AutoTP shards only DeepSpeed can assemble the full tensors; its
    ``_consolidated_16bit_state_dict`` (private, no public equivalent that returns the dict
    instead of writing files) does that once, in this one place.
    """
    if gather:
        return engine._consolidated_16bit_state_dict()
    return objective.state_dict() if is_main else None


def grad_norm(engine: Any) -> Union[torch.Tensor, float, None]:
    """Deprecated: ``engine.get_global_grad_norm()`` (the :class:`del_core.engines.Engine` surface)."""
    from del_core.config import warn_deprecated

    warn_deprecated("del_core.engines.deepspeed.grad_norm(engine)", "engine.get_global_grad_norm()")
    return engine.get_global_grad_norm()


def zero_stage(engine: Any) -> int:
    """Deprecated: ``engine.zero_optimization_stage()``."""
    from del_core.config import warn_deprecated

    warn_deprecated("del_core.engines.deepspeed.zero_stage(engine)", "engine.zero_optimization_stage()")
    return engine.zero_optimization_stage()
