"""The Trainer settings under which a del_core loss would silently not be the loss that trains.

The integration computes the loss from the model's full logits. Settings that replace the LM head
with a fused loss (no logits come back), that compute a different loss, or that split a batch in
ways the normaliser counts do not follow are refused here, each with a message naming the setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

import torch

from del_core.losses import LOSS_PATHS, CompactedPath, LossPath


class UnsupportedSetupError(ValueError):
    """A Trainer setting that the del_core loss cannot honour (the message names it)."""


def argument_problems(args: Any, compute_loss_func: Optional[Callable]) -> list[str]:
    """What in the TrainingArguments (or TRL's SFTConfig) ``args`` and the Trainer's
    ``compute_loss_func`` would replace or bypass the del_core loss; empty when nothing does."""
    problems = []
    if compute_loss_func is not None:
        problems.append("compute_loss_func: the del_core loss is the loss; pass no compute_loss_func")
    if args is None:
        return problems
    if getattr(args, "use_liger_kernel", False):
        problems.append(
            "use_liger_kernel=True: Liger's fused linear cross-entropy computes its own CE from the hidden "
            "states and returns no logits to the del_core loss; set use_liger_kernel=False"
        )
    if getattr(args, "label_smoothing_factor", 0.0):
        problems.append(
            f"label_smoothing_factor={args.label_smoothing_factor}: the del_core losses do not smooth labels; "
            "set it to 0"
        )
    loss_type = getattr(args, "loss_type", None)  # TRL's SFTConfig
    if loss_type is not None and loss_type not in ("nll", "chunked_nll"):
        problems.append(
            f"loss_type={loss_type!r}: TRL's {loss_type} loss would be replaced by the del_core loss; "
            "use loss_type='nll'"
        )
    return problems


def parallelism_problems(n_gpu: int, tp_size: int, cp_size: int, sp_size: int) -> list[str]:
    """Layouts the window counts (summed over all processes) would not follow: every rank must
    hold whole, distinct sequences, or (``sp_size`` > 1, DeepSpeed Ulysses) shards of them cut by
    DeepSpeed's dataloader adapter after the spans were computed on the whole sequences
    (:mod:`del_core.integrations.sequence_parallel`)."""
    problems = []
    if n_gpu > 1:
        problems.append(
            f"n_gpu={n_gpu} (nn.DataParallel in one process): launch one process per device with torchrun or "
            "accelerate launch, or make one device visible"
        )
    for name, size in (("tensor", tp_size), ("context", cp_size)):
        if size > 1:
            problems.append(
                f"{name} parallelism of size {size}: only data parallelism (DDP, DeepSpeed ZeRO, FSDP) and "
                "DeepSpeed sequence parallelism (ParallelismConfig(sp_size=N, sp_backend='deepspeed')) are supported"
            )
    return problems


def sequence_parallel_problems(sp_size: int, weight_is_auto: bool, deepspeed: bool) -> list[str]:
    """What the adapter cannot do under sequence parallelism: without DeepSpeed (whose Ulysses
    runs it), and ``loss_weight="auto"``, which measures lambda in eval mode, where the Trainer runs
    without sequence parallelism on the shards it holds."""
    if sp_size == 1:
        return []
    problems = []
    if not deepspeed:
        problems.append(f"sequence parallelism (sp_size={sp_size}) without DeepSpeed: pass a DeepSpeed config")
    if weight_is_auto:
        problems.append(
            f"loss_weight='auto' with sequence parallelism (sp_size={sp_size}): lambda is measured in eval mode, "
            "where sequence parallelism is off; measure it without sp (or with recipes/train.py) and pass the number"
        )
    return problems


def compact_problems(model: torch.nn.Module, path: LossPath, sp_size: int) -> list[str]:
    """What ``compact=True`` cannot score exactly: a model whose logits are more than its LM-head
    module's output, the path's own refusals (:meth:`del_core.losses.LossPath.check_model`: a head
    with a bias on the chunked path), and sequence parallelism (each rank holds a shard of every
    sequence). Nothing when ``path`` is not compacted."""
    if not isinstance(path, CompactedPath):
        return []
    problems = []
    if sp_size > 1:
        problems.append(f"compact=True with sequence parallelism (sp_size={sp_size}); pass compact=False")
    if not hasattr(model, "get_output_embeddings") or model.get_output_embeddings() is None:
        return [*problems, f"compact=True: {type(model).__name__} has no LM-head module (get_output_embeddings)"]
    try:
        path.check_model(model)
    except ValueError as error:
        problems.append(str(error))
    return problems


def model_problems(config: Any) -> list[str]:
    """Models whose logits are not next-token predictions of their own inputs."""
    if getattr(config, "is_encoder_decoder", False):
        return ["an encoder-decoder model: the del_core Trainer integration trains decoder-only causal LMs"]
    return []


def loss_path_problems(loss_path: str, chunk_size: int) -> list[str]:
    """An unknown ``loss_path`` (see :data:`del_core.losses.LOSS_PATHS`) and a chunk size below 1."""
    if loss_path not in LOSS_PATHS:
        return [
            f"loss_path={loss_path!r}: choose 'logits' (the model's logits) or 'chunked' (from the last hidden "
            "states, chunk by chunk)"
        ]
    return [] if chunk_size >= 1 else [f"chunk_size={chunk_size}: must be >= 1"]


def raise_problems(problems: list[str]) -> None:
    """Raise :class:`UnsupportedSetupError` listing ``problems`` (nothing when empty)."""
    if problems:
        raise UnsupportedSetupError("the del_core loss cannot train with: " + "; ".join(problems))


def model_logits(outputs: Any, targets: torch.Tensor, model_name: str) -> torch.Tensor:
    """The logits [..., T, V] of the forward's ``outputs``, checked against the targets [..., T].

    Refuses outputs without logits (a fused or chunked loss head, e.g. Liger's or TRL's fused LM
    head) and logits for fewer positions than the inputs (``logits_to_keep``)."""
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else None
    if logits is None:
        keys = ", ".join(outputs.keys()) if isinstance(outputs, Mapping) else type(outputs).__name__
        raise UnsupportedSetupError(
            f"the forward of {model_name} returned no logits (got: {keys}). A fused or chunked loss head "
            "(Liger's fused linear cross-entropy, a patched forward, return_dict=False) keeps them from the "
            "del_core loss; use the model's plain forward"
        )
    if logits.shape[:-1] != targets.shape:
        raise UnsupportedSetupError(
            f"the forward of {model_name} returned logits {tuple(logits.shape)} for targets {tuple(targets.shape)}: "
            "every input position needs its logits (do not pass logits_to_keep)"
        )
    return logits


def model_hidden_states(outputs: Any, targets: torch.Tensor, model_name: str) -> torch.Tensor:
    """The last hidden states [..., T, H] of ``outputs`` (a forward with ``output_hidden_states``:
    after the final norm, the LM head's input), checked against the targets [..., T]."""
    states = outputs.get("hidden_states") if isinstance(outputs, Mapping) else None
    if not states:
        raise UnsupportedSetupError(
            f"the forward of {model_name} returned no hidden_states with output_hidden_states=True: "
            "loss_path='chunked' and compact=True need them; use loss_path='logits' without compact"
        )
    if states[-1].shape[:-1] != targets.shape:
        raise UnsupportedSetupError(
            f"the forward of {model_name} returned hidden states {tuple(states[-1].shape)} for targets "
            f"{tuple(targets.shape)}: every input position needs its hidden state"
        )
    return states[-1]


def unsharded_head(model: torch.nn.Module, setting: str) -> torch.nn.Module:
    """The LM-head module of ``model``, for a loss that uses it after the model's forward; refused
    (``setting`` names that loss's option) when FSDP2 holds only this rank's rows of its weight.
    (Under ZeRO-3 its weight is partitioned here, and gathered by the module's own hooks when it
    runs.)"""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise UnsupportedSetupError(f"{setting}: {type(model).__name__} has no LM-head module")
    # A DTensor: FSDP2 resharded the head's unit after the forward and holds only this rank's rows.
    # The Trainer's FSDP2 (accelerate) never does: it gives the head's unit reshard_after_forward=False.
    if getattr(getattr(head, "weight", None), "placements", None) is not None:
        raise UnsupportedSetupError(
            f"{setting}: the LM-head weight is sharded where the loss reads it (a model wrapped with "
            "fully_shard(..., reshard_after_forward=True) on the head's unit); let the Trainer's fsdp settings "
            "wrap the model (accelerate keeps the head's unit unsharded from the forward to the backward) or use "
            "loss_path='logits' without compact"
        )
    return head


def head_weight(model: torch.nn.Module) -> torch.Tensor:
    """The LM-head weight [V, H] (the parameter itself: gradients flow into it); refuses a head
    with a bias (the chunked path scores ``hidden @ weight.T`` only)."""
    head = unsharded_head(model, "loss_path='chunked'")
    weight = getattr(head, "weight", None)
    if weight is None or weight.dim() != 2:
        raise UnsupportedSetupError(f"loss_path='chunked': {type(model).__name__} has no [V, H] LM-head weight")
    if getattr(head, "bias", None) is not None:
        raise UnsupportedSetupError("loss_path='chunked': the LM head has a bias; use loss_path='logits'")
    return weight
