"""torch's FSDP2 (``fully_shard``) around the objective, driven like DeepSpeed's engine.

Every decoder layer (the model's ``_no_split_modules`` classes) is one FSDP unit and the objective
itself the root unit, which holds the embedding, the final norm and the LM head. The objective's
forward computes the loss (:class:`del_core.training.objective.CausalLMObjective`), so the chunked
path reads the LM-head weight while the root unit holds it whole: outside that forward it is this
rank's row shard (a ``DTensor``).

:class:`FSDP2Engine` is driven like DeepSpeed's engine (the names of
:class:`del_core.engines.Engine`): a call per micro-batch, ``backward``, and ``step``,
which steps the optimizer after the last micro-batch of an optimizer step. The micro-batches
before it neither reduce-scatter nor reshard (``set_requires_gradient_sync`` /
``set_reshard_after_backward``); the gradients are clipped over the DTensors; checkpoints are
``torch.distributed.checkpoint`` folders (model and optimizer through ``get_state_dict`` /
``set_state_dict``), which load at another world size. With :mod:`.backend`, the only FSDP2 code of
del_core; torch's FSDP2 modules are imported inside the functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

# Builds the optimizer over the sharded parameters' groups (parameter_groups of the trainer).
OptimizerFactory = Callable[[torch.nn.Module], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]
ENGINE_STATE = "engine_state.pt"  # rank 0's file in a checkpoint: the LR schedule and micro-step


@dataclass(frozen=True)
class FSDP2Settings:
    """How the objective is sharded and stepped: ``bf16`` computes in bf16 on fp32 parameters
    (MixedPrecisionPolicy, gradients reduced in fp32); ``offload`` keeps parameters, gradients and
    optimizer state in CPU memory (CPUOffloadPolicy); ``accumulation`` micro-batches per optimizer
    step; ``grad_clip`` the gradients' global L2 norm bound (0: not clipped, still measured)."""

    bf16: bool
    offload: bool
    accumulation: int
    grad_clip: float


def decoder_layers(lm: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: the modules whose class a Hugging Face model names in
    ``_no_split_modules`` (e.g. Qwen2DecoderLayer). ValueError when there are none."""
    names = set(getattr(lm, "_no_split_modules", None) or ())
    # through the class's bases: fully_shard swaps a module's class for an FSDP subclass of it
    layers = [m for m in lm.modules() if any(c.__name__ in names for c in type(m).__mro__)]
    if not layers:
        raise ValueError(f"FSDP2: {type(lm).__name__} names no decoder-layer class (_no_split_modules)")
    return layers


def shard(objective: torch.nn.Module, settings: FSDP2Settings, device: torch.device) -> None:
    """``fully_shard`` each decoder layer of ``objective.lm``, then the objective (the root unit:
    embedding, final norm, LM head), over all ranks on ``device``'s type. In place: the
    parameters become DTensors sharded by rows. Collective."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    # Inputs are not cast: the loss's global counts (num_tokens, num_digits) stay exact; the
    # embedding's bf16 output is what the decoder layers receive.
    precision = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if settings.bf16 else None,
        reduce_dtype=torch.float32 if settings.bf16 else None,
        cast_forward_inputs=False,
    )
    options = {
        "mesh": mesh,
        "mp_policy": precision,
        # Page-locked host memory (fast copies to the GPU) needs a GPU to exist.
        "offload_policy": CPUOffloadPolicy(pin_memory=device.type == "cuda") if settings.offload else OffloadPolicy(),
    }
    for layer in decoder_layers(objective.lm):
        fully_shard(layer, **options)
    fully_shard(objective, **options)
    # FSDP2 makes the first unit whose forward runs the root. Held-out evaluation calls
    # objective.lm before the first training step: the decoder layers would claim to be roots
    # and the objective's first forward then fails. Settle the root now (no public call does).
    objective._get_fsdp_state()._lazy_init()


@dataclass(frozen=True)
class ShardBytes:
    """This rank's bytes of parameters, gradients and optimizer state (local shards only)."""

    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def shard_bytes(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> ShardBytes:
    """What ``module``'s parameters and gradients and ``optimizer``'s state hold on this rank."""
    params = list(module.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return ShardBytes(
        sum(_local_bytes(p) for p in params),
        sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        sum(_local_bytes(v) for v in state),
    )


class FSDP2Engine:
    """The sharded objective with its optimizer and LR schedule, driven like DeepSpeed's engine
    (see the module docstring). ``module`` is the objective after :func:`shard`."""

    def __init__(
        self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, settings: FSDP2Settings
    ):
        self.module = module
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.settings = settings
        self.micro_step = 0  # micro-batches of the current optimizer step done
        self._grad_norm: Optional[torch.Tensor] = None
        self.first_step_bytes: Optional[ShardBytes] = None  # measured after the first optimizer step

    def __call__(self, **inputs: Any) -> Any:
        return self.module(**inputs)

    def backward(self, loss: torch.Tensor, scale_wrt_gas: bool = False) -> None:
        """``loss.backward()``; only the step's last micro-batch reduce-scatters its gradients
        (summed locally before) and reshards the parameters. ``scale_wrt_gas`` is DeepSpeed's
        keyword: the trainer scales the loss itself, as it asks DeepSpeed to."""
        last = self.micro_step + 1 == self.settings.accumulation
        self.module.set_requires_gradient_sync(last)
        self.module.set_reshard_after_backward(last)
        loss.backward()

    def step(self) -> None:
        """After each micro-batch: at the step's last one, clip (the global norm over the
        DTensor gradients, kept for :meth:`get_global_grad_norm`), step the optimizer and the
        LR schedule, and zero the gradients."""
        self.micro_step += 1
        if self.micro_step < self.settings.accumulation:
            return
        self.micro_step = 0
        params = [p for p in self.module.parameters() if p.grad is not None]
        bound = self.settings.grad_clip if self.settings.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, bound)
        self._grad_norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        self.optimizer.step()
        if self.first_step_bytes is None:  # gradients and optimizer state both exist only here
            self.first_step_bytes = shard_bytes(self.module, self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def get_global_grad_norm(self) -> Optional[torch.Tensor]:
        """The last optimizer step's gradient norm before clipping (0-dim, not read), or None."""
        return self._grad_norm

    def _sharded_state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.module, self.optimizer)
        return {"model": model, "optimizer": optimizer}

    def save_checkpoint(
        self, save_dir: str, tag: str, save_latest: bool = False, exclude_frozen_parameters: bool = False
    ) -> None:
        """Write ``save_dir/tag``: every rank its shards of the model and optimizer
        (``torch.distributed.checkpoint``), rank 0 the LR schedule. Collective. The keywords are
        DeepSpeed's (no ``latest`` file is written; FSDP2 runs have no frozen weights)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        path = Path(save_dir) / tag
        dcp.save(self._sharded_state(), checkpoint_id=str(path))
        if dist.get_rank() == 0:
            torch.save({"scheduler": self.scheduler.state_dict()}, path / ENGINE_STATE)

    def load_checkpoint(self, load_dir: str, tag: str, load_module_strict: bool = True) -> tuple[str, dict]:
        """Load ``load_dir/tag`` written by :meth:`save_checkpoint` at any world size (DCP
        reshards); (the path, {}) as DeepSpeed returns it. Collective."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        path = Path(load_dir) / tag
        state = self._sharded_state()
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(
            self.module, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        self.scheduler.load_state_dict(torch.load(path / ENGINE_STATE, weights_only=False)["scheduler"])
        self.micro_step = 0
        return str(path), {}

    def full_state_dict(self, is_main: bool) -> Optional[dict]:
        """The full (unsharded) weights on rank 0, in CPU memory, keyed like the objective's
        ``state_dict``; None elsewhere. Collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.module, options=options)
        return state if is_main else None

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """The root unit's parameters (embedding, final norm, LM head) whole inside the block,
        for evaluation code that calls ``objective.lm`` rather than the objective; the decoder
        layers gather their own. Collective."""
        self.module.unshard()
        try:
            yield
        finally:
            self.module.reshard()


def initialize(
    objective: torch.nn.Module,
    settings: FSDP2Settings,
    device: torch.device,
    make_optimizer: OptimizerFactory,
    make_scheduler: SchedulerFactory,
) -> FSDP2Engine:
    """``objective`` sharded (:func:`shard`), then its optimizer (built on the sharded
    parameters) and LR schedule, as an :class:`FSDP2Engine`. Collective."""
    shard(objective, settings, device)
    optimizer = make_optimizer(objective)
    return FSDP2Engine(objective, optimizer, make_scheduler(optimizer), settings)


def gradient_divisor(dp: int) -> int:
    """Deprecated: :attr:`FSDP2Backend.gradient_divisor` (FSDP2's reduce-scatter averages over the
    ``dp`` data-parallel ranks, so the trainer multiplies each loss by ``dp``)."""
    from del_core.config import warn_deprecated

    warn_deprecated("del_core.engines.fsdp2.gradient_divisor(dp)", "the backend's gradient_divisor")
    return dp
