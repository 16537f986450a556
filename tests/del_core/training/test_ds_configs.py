"""The ZeRO configurations parse and validate with DeepSpeed once their "auto" values are filled."""

import json

import pytest

from helpers.shared import REPO

deepspeed_config = pytest.importorskip("deepspeed.runtime.config")

CONFIGS = REPO / "ds_configs"


def fill(config: dict, micro_batch: int, accumulation: int, world: int, bf16: bool) -> dict:
    """What the training entry point does: replace every "auto" with the recipe's values."""
    filled = json.loads(json.dumps(config))
    filled["train_micro_batch_size_per_gpu"] = micro_batch
    filled["gradient_accumulation_steps"] = accumulation
    filled["train_batch_size"] = micro_batch * accumulation * world
    filled["bf16"]["enabled"] = bf16
    assert "auto" not in json.dumps(filled)
    return filled


@pytest.mark.parametrize("name, stage, offload", [("zero2", 2, False), ("zero3", 3, False), ("zero3_offload", 3, True)])
def test_config_is_valid_for_deepspeed(name, stage, offload):
    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    config = deepspeed_config.DeepSpeedConfig(fill(raw, micro_batch=4, accumulation=32, world=1, bf16=True))
    assert config.zero_optimization_stage == stage
    assert config.train_batch_size == 128 and config.gradient_accumulation_steps == 32
    assert config.gradient_clipping == 1.0 and config.bfloat16_config.enabled
    assert (config.zero_config.offload_optimizer is not None) == offload
    assert (config.zero_config.offload_param is not None) == offload
