"""recipes/memory_estimate.py: the per-GPU prediction of a recipe, with no download."""

from __future__ import annotations

import subprocess
import sys

import pytest

from del_core.memory_model import KNOWN_MODELS, TrainShape, estimate
from del_core.training import load_train_config
from helpers.shared import REPO

pytestmark = [pytest.mark.launches, pytest.mark.slow]

SCRIPT = REPO / "recipes" / "memory_estimate.py"
RECIPE = REPO / "recipes" / "configs" / "qwen2.5-7b-long-traces.yaml"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_long_traces_recipe_is_predicted_per_gpu():
    config = load_train_config(RECIPE)
    assert (config.parallel.sp, config.parallel.zero_stage, config.loss.path) == (4, 3, "chunked")
    assert config.data.max_length == 32768 and config.model.gradient_checkpointing
    proc = run(str(RECIPE), "world=16")
    assert proc.returncode == 0, proc.stderr
    expected = estimate(KNOWN_MODELS["Qwen/Qwen2.5-7B"], TrainShape(32768, sp=4, world=16))
    printed = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines() if line.endswith(" GB")}
    assert printed["total"] == f"{expected.total / 1e9:.2f}" == "14.79"
    assert printed["activation_peak"] == f"{expected.activation_peak / 1e9:.2f}"
    # every sp Qwen2.5-7B's heads allow (28 attention, 4 key-value heads), on the same 16 GPUs
    assert [line.split()[0] for line in proc.stdout.splitlines() if line.strip().startswith("sp=")] == [
        "sp=1",
        "sp=2",
        "sp=4",
    ]


def test_an_unknown_model_is_named():
    proc = run(str(RECIPE), "model.name=some/unknown-7b")
    assert proc.returncode == 2
    assert "model.name some/unknown-7b: no config.json there" in proc.stderr
