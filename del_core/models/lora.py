"""LoRA adapters through PEFT: wrapping a loaded causal LM, counting what trains, and turning a full
state dict of the wrapped model into the two exports (the merged model and the PEFT adapter).

The training objective keeps the Hugging Face model itself (``peft_model.base_model.model``, whose
chosen ``nn.Linear`` layers PEFT replaced in place by LoRA layers), so everything that reads the
model (the chunked loss's ``base_model`` and LM head, held-out evaluation) works unchanged. The
:class:`peft.PeftModel` wrapper is kept only to write the adapter.

State dicts here are keyed like ``model.state_dict()`` of that Hugging Face model: a LoRA layer
``M`` holds ``M.base_layer.weight`` (frozen), ``M.lora_A.default.weight`` [r, in] and
``M.lora_B.default.weight`` [out, r]; its merged weight is ``W + scaling * B @ A``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ADAPTER = "default"  # PEFT's name for the one adapter of a run
ALL_LINEAR = "all-linear"  # PEFT's shorthand: every nn.Linear except the output head


class LoraTargetError(ValueError):
    """``lora.target_modules`` names no module of the model, or one LoRA cannot wrap here."""


@dataclass(frozen=True)
class LoraSettings:
    """What PEFT is given (the ``lora`` section of the training config, checked there)."""

    r: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]

    def describe(self) -> str:
        return f"r {self.r}, alpha {self.alpha:g}, dropout {self.dropout:g}, targets {','.join(self.target_modules)}"


def _matches(module_name: str, target: str) -> bool:
    """PEFT's rule for a plain-name target: the module's full name or its last dotted parts."""
    return module_name == target or module_name.endswith(f".{target}")


def check_targets(model: torch.nn.Module, targets: Sequence[str]) -> list[str]:
    """The names of the modules LoRA will wrap; :class:`LoraTargetError` (naming the key) when a
    target matches nothing, matches something other than ``nn.Linear`` (embeddings and the tied
    head would need their own merge rules), or matches the output head (the chunked loss reads the
    head's weight directly, which would bypass an adapter on it)."""
    head = model.get_output_embeddings()
    modules = dict(model.named_modules())
    linear = [name for name, m in modules.items() if isinstance(m, torch.nn.Linear) and m is not head]
    if tuple(targets) == (ALL_LINEAR,):
        if not linear:
            raise LoraTargetError(f"lora.target_modules: {type(model).__name__} has no linear layers besides the head")
        return linear
    chosen: list[str] = []
    for target in targets:
        hits = [name for name in modules if name and _matches(name, target)]
        if not hits:
            examples = sorted({name.rsplit(".", 1)[-1] for name in linear})
            raise LoraTargetError(
                f"lora.target_modules: no module named {target!r} in {type(model).__name__} "
                f"(its linear layers: {', '.join(examples)}; or all-linear)"
            )
        for name in hits:
            if modules[name] is head:
                raise LoraTargetError(f"lora.target_modules: {target!r} is the output head, which LoRA may not wrap")
            if not isinstance(modules[name], torch.nn.Linear):
                raise LoraTargetError(f"lora.target_modules: {name} is a {type(modules[name]).__name__}, not nn.Linear")
        chosen += [name for name in hits if name not in chosen]
    return chosen


def wrap_with_lora(model: Any, settings: LoraSettings, seed: int, gradient_checkpointing: bool) -> Any:
    """``peft.get_peft_model(model, LoraConfig(...))``: the base weights frozen, adapters added.

    The adapters are initialised from ``seed`` alone (A random, B zero: the wrapped model starts
    as the base model) inside a forked RNG, so their values do not depend on how the model was
    loaded (ZeRO-3's partitioned construction, world size) and the training RNG stream is not
    moved. With gradient checkpointing the embedding output must require grad, or the
    checkpointed blocks of a frozen model would see no input needing a gradient (reentrant
    checkpointing would then drop the adapters' gradients; PEFT usually registers the hook itself).
    """
    from peft import LoraConfig, get_peft_model

    targets = settings.target_modules
    peft_config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=ALL_LINEAR if tuple(targets) == (ALL_LINEAR,) else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # Adapters in the base weights' dtype (PEFT would up-cast them to fp32 next to a bf16
        # base): DeepSpeed keeps the fp32 master copies itself, and ZeRO-3 partitions one dtype.
        peft_model = get_peft_model(model, peft_config, autocast_adapter_dtype=False)
    if gradient_checkpointing and getattr(model, "_require_grads_hook", None) is None:
        model.enable_input_require_grads()
    return peft_model


def hf_model(peft_model: Any) -> Any:
    """The Hugging Face model inside a PEFT wrapper (its linear layers replaced by LoRA layers)."""
    return peft_model.base_model.model


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameters; under ZeRO-3 a partitioned parameter counts its full size."""
    trainable = total = 0
    for param in model.parameters():
        count = int(getattr(param, "ds_numel", param.numel()))
        total += count
        trainable += count if param.requires_grad else 0
    return trainable, total


def lora_layers(model: torch.nn.Module) -> dict[str, Any]:
    """Module name -> PEFT LoRA layer, for every layer carrying the run's adapter."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer) and ADAPTER in m.lora_A}


def merged_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` (a full state dict of the LoRA-wrapped ``model``) with every adapter merged into
    its base weight, in the plain Hugging Face keys of the unwrapped model: ``M.weight = W +
    scaling * B @ A`` (computed in fp32, stored in W's dtype), ``M.base_layer.*`` renamed ``M.*``.
    Raises when a PEFT key would be left over."""
    merged = dict(state)
    for name, layer in lora_layers(model).items():
        a = merged.pop(f"{name}.lora_A.{ADAPTER}.weight").float()
        b = merged.pop(f"{name}.lora_B.{ADAPTER}.weight").float()
        for key in [k for k in merged if k.startswith(f"{name}.base_layer.")]:
            merged[f"{name}.{key[len(name) + len('.base_layer.') :]}"] = merged.pop(key)
        weight = merged[f"{name}.weight"]
        merged[f"{name}.weight"] = (weight.float() + layer.scaling[ADAPTER] * (b @ a)).to(weight.dtype)
    left = [k for k in merged if ".lora_" in k or ".base_layer." in k]
    if left:
        raise RuntimeError(f"export: PEFT keys left after merging: {left[:3]}")
    return merged


def save_adapter(peft_model: Any, state: dict[str, torch.Tensor], directory: Path) -> None:
    """Write the adapter (``adapter_config.json`` + ``adapter_model.safetensors``, loadable by
    ``peft.PeftModel.from_pretrained(base, directory)``) from ``state``, a full state dict of the
    wrapped Hugging Face model (the live parameters may be ZeRO-3 partitions, so PEFT is given
    the gathered values instead of reading them)."""
    prefix = "base_model.model."  # the PeftModel's own keys for the wrapped model's parameters
    adapter_state = {prefix + k: v for k, v in state.items() if ".lora_" in k}
    peft_model.save_pretrained(str(directory), state_dict=adapter_state, save_embedding_layers=False)
