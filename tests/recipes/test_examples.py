"""The README's Trainer examples (recipes/examples/) run as a user runs them, on a tiny random
Qwen2 with the real Qwen2 tokenizer: the loss is del_core's, and its parts are logged."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from helpers.shared import REPO, real_tokenizer
from helpers.training import make_tiny_qwen2

pytestmark = pytest.mark.launches

EXAMPLES = REPO / "recipes" / "examples"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_qwen2(
        tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"), kv_heads=1, hidden=16, layers=1, heads=2
    )


def logged_steps(stdout: str) -> list[dict]:
    """The Trainer's per-step log dicts printed on stdout (values are strings in transformers 5)."""
    return [ast.literal_eval(line[line.index("{") :]) for line in stdout.splitlines() if "'ce':" in line]


@pytest.mark.parametrize("script", ["hf_trainer.py", "trl_sft.py"])
def test_example_trains_with_the_del_loss(script, tiny_model_dir, tmp_path):
    if script == "trl_sft.py":
        pytest.importorskip("trl")
    command = [sys.executable, str(EXAMPLES / script), f"model={tiny_model_dir}", "steps=2"]
    command += [f"output_dir={tmp_path / 'out'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[del] loss del (lambda 0.128); digits: single-digit" in proc.stdout
    steps = logged_steps(proc.stdout)
    assert len(steps) == 2, proc.stdout[-2000:]
    for step in steps:
        loss, ce, aux = (float(step[key]) for key in ("loss", "ce", "aux"))
        assert aux > 0 and abs(loss - (ce + aux)) <= 1e-3 * loss, step


@pytest.mark.parametrize("script", ["hf_trainer.py", "trl_sft.py"])
def test_example_takes_loss_weight_auto(script, tiny_model_dir, tmp_path):
    """``loss.weight=auto`` (0.1: "invalid float value: 'auto'" in hf_trainer.py, the 1.0
    placeholder printed as lambda in trl_sft.py): lambda = 0.02 x CE / digit term of the first
    step's batch at the initial weights, the trainer's rule, so that step's logged aux is 0.02 x
    its CE; both examples print the measured lambda (their shared argument handling)."""
    if script == "trl_sft.py":
        pytest.importorskip("trl")
    command = [sys.executable, str(EXAMPLES / script), f"model={tiny_model_dir}", "steps=1"]
    command += [f"output_dir={tmp_path / 'out'}", "loss.weight=auto"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[del] loss del (lambda auto, from the first batch)" in proc.stdout
    assert "(lambda 1.0)" not in proc.stdout
    measured = [ast.literal_eval(line[line.index("{") :]) for line in proc.stdout.splitlines() if "auto_loss" in line]
    assert len(measured) == 1, proc.stdout[-2000:]
    weight, ce, unit = (
        float(measured[0][key]) for key in ("auto_loss_weight", "auto_weight_ce", "auto_weight_unit_term")
    )
    assert weight == pytest.approx(0.02 * ce / unit, rel=1e-3)
    assert f"[del] lambda auto = {weight:.4g}" in proc.stdout
    (step,) = logged_steps(proc.stdout)
    assert float(step["ce"]) == pytest.approx(ce, rel=1e-3)  # the same batch at the same weights
    assert float(step["aux"]) == pytest.approx(0.02 * float(step["ce"]), rel=1e-3)


def test_a_bad_loss_setting_is_one_line_before_the_model_loads(tmp_path):
    command = [sys.executable, str(EXAMPLES / "hf_trainer.py"), f"model={tmp_path / 'absent'}"]
    proc = subprocess.run(command + ["loss=mle", "loss.weight=auto"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "error: loss.weight=auto: loss mle has no weight lambda"
