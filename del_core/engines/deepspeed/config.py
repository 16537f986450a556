"""The DeepSpeed config of a run: one of ``ds_configs/`` with its "auto" values filled from the recipe.

Batch sizes: ``global_batch_size = micro_batch_size x gradient_accumulation x data-parallel ranks``
(:class:`del_core.engines.BatchShape`); the recipe fixes the global and micro sizes, the world size
fixes the rest.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from del_core.config import ConfigError
from del_core.engines.interface import BatchShape
from del_core.engines.settings import OptimizerConfig, ParallelConfig

# The project's ZeRO-2 / ZeRO-3 / ZeRO-3-offload files at the top of the checkout; a wheel install
# without them takes an explicit parallel.ds_config.
DS_CONFIG_DIR = Path(__file__).resolve().parents[3] / "ds_configs"


def config_path(parallel: ParallelConfig) -> Path:
    if parallel.ds_config:
        return Path(parallel.ds_config)
    if parallel.offload:
        return DS_CONFIG_DIR / "zero3_offload.json"
    return DS_CONFIG_DIR / f"zero{parallel.zero_stage}.json"


def _fill(section: dict, key: str, value: Any) -> None:
    if section.get(key, "auto") == "auto":
        section[key] = value


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"DeepSpeed config {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"DeepSpeed config {path}: not valid JSON ({err})") from None


def _fill_batch_sizes(ds: dict, shape: BatchShape, tp: int, path: Path) -> None:
    _fill(ds, "train_micro_batch_size_per_gpu", shape.micro_batch)
    _fill(ds, "gradient_accumulation_steps", shape.accumulation)
    # DeepSpeed counts every rank, tensor-parallel replicas included, in train_batch_size; the
    # recipe's global batch counts distinct sequences (tensor-parallel ranks share theirs).
    _fill(ds, "train_batch_size", shape.global_batch * tp)
    expected = ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * shape.data_parallel * tp
    if ds["train_batch_size"] != expected:
        raise ConfigError(f"{path}: its batch sizes contradict the recipe's (global {shape.global_batch})")


def _set_optimizer(ds: dict, optimizer: OptimizerConfig, use_ds_optimizer: bool) -> None:
    if use_ds_optimizer:
        params = {
            "lr": optimizer.lr,
            "betas": list(optimizer.betas),
            "eps": optimizer.eps,
            "weight_decay": optimizer.weight_decay,
        }
        ds["optimizer"] = {"type": "AdamW", "params": params}
        return
    ds.pop("optimizer", None)
    ds["zero_allow_untested_optimizer"] = True
    if "offload_optimizer" in ds["zero_optimization"]:
        ds["zero_force_ds_cpu_optimizer"] = False


def build_ds_config(
    parallel: ParallelConfig, optimizer: OptimizerConfig, shape: BatchShape, bf16: bool, use_ds_optimizer: bool
) -> dict:
    """The filled DeepSpeed config dict for ``shape`` (its data-parallel ranks: world size / tp,
    or / sp)."""
    path = config_path(parallel)
    ds = copy.deepcopy(_read(path))
    explicit = bool(parallel.ds_config)
    _fill_batch_sizes(ds, shape, parallel.tp, path)
    if explicit:
        _fill(ds, "gradient_clipping", optimizer.grad_clip)
    else:  # the project's own files: the recipe's value wins
        ds["gradient_clipping"] = optimizer.grad_clip
    ds.setdefault("bf16", {})
    _fill(ds["bf16"], "enabled", bf16)
    if ds.get("fp16", {}).get("enabled") == "auto":
        ds["fp16"]["enabled"] = False
    zero = ds.setdefault("zero_optimization", {})
    if not explicit:
        zero["stage"] = 3 if parallel.offload else parallel.zero_stage
    _set_optimizer(ds, optimizer, use_ds_optimizer)
    if parallel.tp > 1:
        # AutoTP shards the body; the LM head is column (vocab) parallel and returns local logit
        # shards, which the loss reduces with digit-restricted partial sums (del_core.parallel).
        ds["tensor_parallel"] = {"autotp_size": parallel.tp, "vocab_parallel_lm_head": True}
    if parallel.sp > 1:
        # Read by the ZeRO-3 partitioning of from_pretrained (before the Ulysses groups are passed
        # to deepspeed.initialize): its batch sizes count the world / sp data-parallel ranks.
        ds["sequence_parallel_size"] = parallel.sp
    ds.pop("scheduler", None)  # the recipe's own warm-up + cosine schedule is passed to deepspeed.initialize
    leftover = _find_auto(ds)
    if leftover:
        raise ConfigError(f"{path}: no value for the 'auto' keys {', '.join(leftover)}")
    return ds


def _find_auto(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [k for key, value in node.items() for k in _find_auto(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if node == "auto" else []
