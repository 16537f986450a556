"""A run's identity: every setting that changes what the run computes, as flat dotted keys.

A checkpoint's ``COMPLETE.json`` records the identity of the run that wrote it; a run that resumes
it must have the same one, or name each key it changes on purpose in ``run.resume_override``
(the new value then takes effect from the resumed step, and the records say so).

Free keys (:data:`FREE_KEYS`) change where and how a run is written or how fast it computes, not
what: output folder, resume/overwrite, checkpoint and log cadence, reporting, export, held-out
evaluation, caches, attention kernel, gradient checkpointing, the loss's computation path
(chunked/compiled/compacted give the same loss), the micro-batch size (same global batch), padding-free
micro-batches (same examples) and CPU offload.
``run.max_steps`` and ``run.epochs`` are compared through ``run.total_steps`` (the LR schedule
depends on it): extending a run is ``run.resume_override=run.total_steps``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from del_core.config import ConfigError, config_to_dict
from del_core.engines import backend_type

FREE_KEYS = frozenset(
    {
        "run.output_dir",
        "run.resume",
        "run.resume_override",
        "run.overwrite",
        "run.save_every",
        "run.save_total_limit",
        "run.export",
        "run.log_every",
        "run.report_to",
        "run.wandb_project",
        "run.fail_at_step",
        "run.eval_every",
        "run.micro_batch_size",
        "run.max_steps",  # compared as run.total_steps
        "run.epochs",  # compared as run.total_steps
        "data.eval_source",
        "data.eval_size",
        "data.eval_generate",
        "data.max_new_tokens",
        "data.num_proc",
        "data.padding_free",
        "data.cache_dir",
        "model.cache_dir",
        "model.attn_implementation",
        "model.gradient_checkpointing",
        "loss.path",
        "loss.chunk_size",
        "loss.compile",
        "loss.compile_backend",
        "loss.compact",
        "parallel.offload",
    }
)
# Keys whose checkpoint tensors fit no other value: never overridable.
STRUCTURAL_KEYS = frozenset(
    {
        "model.name",
        "model.tokenizer",
        "parallel.engine",
        "parallel.tp",
        "parallel.zero_stage",
        "parallel.world_size",
        "parallel.ds_config",
    }
)
OVERRIDE_ALIASES = {"run.max_steps": "run.total_steps", "run.epochs": "run.total_steps"}
# Markers written before the identity held dotted keys: their flat names.
_LEGACY_KEYS = {
    "tp": "parallel.tp",
    "num_items": "data.num_items",
    "global_batch_size": "run.global_batch_size",
    "seed": "run.seed",
    "data": "data.source",
    "packing": "data.packing",
    "max_length": "data.max_length",
    "total_steps": "run.total_steps",
    "loss": "loss.name",
    "prompt_format": "data.prompt_format",
}


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)
    else:
        out[prefix] = json.loads(json.dumps(value))  # tuples as lists: comparable with a marker's values


def run_identity(config: Any, num_items: int, total_steps: int, world_size: int) -> dict[str, Any]:
    """The identity of a run of ``config`` (a TrainConfig) over ``num_items`` sequences for
    ``total_steps`` steps on ``world_size`` ranks (not recorded for an engine whose checkpoints
    reshard on load: :attr:`del_core.engines.Backend.reshards_checkpoints`): dotted key -> value, sorted."""
    flat: dict[str, Any] = {}
    for section, values in config_to_dict(config).items():
        _flatten(section, values, flat)
    if not config.lora.enabled:
        flat = {k: v for k, v in flat.items() if not k.startswith("lora.") or k == "lora.enabled"}
    flat.update({"data.num_items": num_items, "run.total_steps": total_steps})
    if not backend_type(config.parallel.engine).reshards_checkpoints:
        flat["parallel.world_size"] = world_size
    return {k: flat[k] for k in sorted(flat) if k not in FREE_KEYS}


def saved_identity(state: dict) -> dict[str, Any]:
    """The identity a checkpoint marker records (older markers: their flat keys, renamed)."""
    if "identity" in state:
        return state["identity"]
    return {_LEGACY_KEYS[k]: v for k, v in state.items() if k in _LEGACY_KEYS}


@dataclass(frozen=True)
class Override:
    """One identity key a resumed run changed on purpose (``run.resume_override``)."""

    key: str
    saved: Any
    now: Any
    step: int  # the first step done with the new value is step + 1


def override_keys(names: list[str]) -> set[str]:
    return {OVERRIDE_ALIASES.get(name, name) for name in names}


def compare(
    where: str, saved: dict[str, Any], current: dict[str, Any], allowed: list[str], step: int
) -> list[Override]:
    """The overrides a resume of the checkpoint ``where`` (identity ``saved``, at ``step``) makes;
    ConfigError naming every differing key with both values unless ``allowed`` lists it. Keys
    the marker does not record (written before they were part of the identity) are not compared."""
    allowed_keys = override_keys(allowed)
    differing = [k for k in current if k in saved and saved[k] != current[k]]
    refused = [k for k in differing if k not in allowed_keys or k in STRUCTURAL_KEYS]
    if refused:
        changes = "; ".join(f"{k}: checkpoint {saved[k]!r}, now {current[k]!r}" for k in refused)
        structural = [k for k in refused if k in STRUCTURAL_KEYS]
        hint = (
            f" ({', '.join(structural)} cannot be overridden: the checkpoint's tensors fit no other value)"
            if structural
            else ""
        )
        raise ConfigError(
            f"resume: {where} was written by a run that computes differently: {changes}. Resume with the "
            f"checkpoint's values, or name the keys to change on purpose: "
            f"run.resume_override=[{','.join(refused)}]{hint}"
        )
    return [Override(k, saved[k], current[k], step) for k in differing]
