"""The DeepSpeed config of a run: one of ``ds_configs/`` with its "auto" values filled from the recipe.

Batch sizes: ``global_batch_size = micro_batch_size x gradient_accumulation x data-parallel ranks``;
the recipe fixes the global and micro sizes, the world size fixes the rest.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from recipes.config import ConfigError, TrainConfig

DS_CONFIG_DIR = Path(__file__).resolve().parents[1] / "ds_configs"


def config_path(config: TrainConfig) -> Path:
    if config.ds_config:
        return Path(config.ds_config)
    if config.offload:
        return DS_CONFIG_DIR / "zero3_offload.json"
    return DS_CONFIG_DIR / f"zero{config.zero_stage}.json"


def accumulation_steps(config: TrainConfig, data_parallel: int) -> int:
    per_step = config.micro_batch_size * data_parallel
    if config.global_batch_size % per_step:
        raise ConfigError(
            f"global_batch_size {config.global_batch_size} is not divisible by micro_batch_size "
            f"{config.micro_batch_size} x {data_parallel} data-parallel ranks"
        )
    return config.global_batch_size // per_step


def _fill(section: dict, key: str, value: Any) -> None:
    if section.get(key, "auto") == "auto":
        section[key] = value


def build_ds_config(config: TrainConfig, data_parallel: int, bf16: bool, use_ds_optimizer: bool) -> dict:
    """The filled DeepSpeed config dict for ``data_parallel`` ranks (world size / tp)."""
    path = config_path(config)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"DeepSpeed config {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"DeepSpeed config {path}: not valid JSON ({err})") from None
    ds = copy.deepcopy(raw)
    _fill(ds, "train_micro_batch_size_per_gpu", config.micro_batch_size)
    _fill(ds, "gradient_accumulation_steps", accumulation_steps(config, data_parallel))
    # DeepSpeed counts every rank, tensor-parallel replicas included, in train_batch_size; the
    # recipe's global batch counts distinct sequences (tensor-parallel ranks share theirs).
    _fill(ds, "train_batch_size", config.global_batch_size * config.tp)
    if config.ds_config:
        _fill(ds, "gradient_clipping", config.grad_clip)
    else:  # the project's own files: the recipe's value wins
        ds["gradient_clipping"] = config.grad_clip
    if ds["train_batch_size"] != ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * data_parallel * config.tp:
        raise ConfigError(f"{path}: its batch sizes contradict the recipe's (global {config.global_batch_size})")
    ds.setdefault("bf16", {})
    _fill(ds["bf16"], "enabled", bf16)
    if ds.get("fp16", {}).get("enabled") == "auto":
        ds["fp16"]["enabled"] = False
    zero = ds.setdefault("zero_optimization", {})
    if not config.ds_config:
        zero["stage"] = 3 if config.offload else config.zero_stage
    if use_ds_optimizer:
        ds["optimizer"] = {
            "type": "AdamW",
            "params": {
                "lr": config.lr, "betas": list(config.adam_betas), "eps": config.adam_eps,
                "weight_decay": config.weight_decay,
            },
        }
    else:
        ds.pop("optimizer", None)
        ds["zero_allow_untested_optimizer"] = True
        if "offload_optimizer" in zero:
            ds["zero_force_ds_cpu_optimizer"] = False
    if config.tp > 1:
        # AutoTP shards the body; the LM head is column (vocab) parallel and returns local logit
        # shards, which the loss reduces with digit-restricted partial sums (del_core.parallel).
        ds["tensor_parallel"] = {"autotp_size": config.tp, "vocab_parallel_lm_head": True}
    ds.pop("scheduler", None)  # the recipe's own warm-up + cosine schedule is passed to deepspeed.initialize
    leftover = _find_auto(ds)
    if leftover:
        raise ConfigError(f"{path}: no value for the 'auto' keys {', '.join(leftover)}")
    return ds


def _find_auto(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [k for key, value in node.items() for k in _find_auto(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if node == "auto" else []
