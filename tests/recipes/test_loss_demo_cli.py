"""`make demo` (recipes/loss_demo.py), end to end on a tiny random Qwen2 model with the real Qwen2 tokenizer."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers.shared import REPO, real_tokenizer
from helpers.training import make_tiny_qwen2

pytestmark = pytest.mark.launches

DEMO = REPO / "recipes" / "loss_demo.py"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_qwen2(
        tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"), kv_heads=1, hidden=16, layers=1, heads=2
    )


def test_demo_runs_end_to_end(tiny_model_dir):
    args = [f"model={tiny_model_dir}", "eval_problems=3", "steps=2", "batch_size=2", "threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    vocab_line = "Digit vocabulary: single-digit (10 number tokens, one digit per token): "
    assert vocab_line + "'0'..'9' = [15, 16, 17, 18, 19, 20, 21, 22, 23, 24], '.' = 13" in out
    for name in ("mle", "mixce", "emo", "ntl_was", "ntl_mse", "dist2", "del"):
        row = re.search(rf"^\s+{name}\s+([-\d.]+)\s+([-\d.]+)", out, re.M)
        assert row and all(abs(float(v)) < 100 for v in row.groups()), name
    assert "[del] step   2/2" in out and "[mle] step   2/2" in out
    assert re.search(r"^\s+del\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$", out, re.M)
