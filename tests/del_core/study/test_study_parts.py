"""recipes/study.py: its parts on hand-made numbers, and a 2-step smoke run of the whole study (2 losses,
1 seed) on a tiny random Qwen2 with the real Qwen2 tokenizer, run twice to check that it resumes.

The study itself (recipes/configs/study-cpu.yaml, ~50 min) is not run here."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from conftest import REPO, real_tokenizer, shared_dir
from recipes.study import (StudyError, aggregate, load_study_config, mean_curve, score_heldout,
                           train_overrides)
from recipes.study_data import make_rows, make_splits
from recipes.study_report import compare, markdown, verdicts

STUDY = REPO / "recipes" / "study.py"
CPU_CONFIG = REPO / "recipes" / "configs" / "study-cpu.yaml"


# --- parts --------------------------------------------------------------------------------------
def test_aggregate_mean_and_sample_std():
    stats = aggregate([0.50, 0.60, 0.70])
    assert stats["mean"] == pytest.approx(0.60) and stats["std"] == pytest.approx(0.10) and stats["n"] == 3
    stats = aggregate([2.0, None, 4.0, float("nan")])  # missing and NaN values are left out
    assert stats == {"mean": 3.0, "std": pytest.approx(math.sqrt(2.0)), "n": 2, "values": [2.0, 4.0]}
    assert aggregate([7.0]) == {"mean": 7.0, "std": None, "n": 1, "values": [7.0]}
    assert aggregate([None]) == {"mean": None, "std": None, "n": 0, "values": []}


def test_mean_curve_over_seeds():
    curves = [[{"step": 1, "ce": 2.0}, {"step": 2, "ce": 1.0}], [{"step": 1, "ce": 4.0}, {"step": 2, "ce": 3.0}]]
    curve = mean_curve(curves)
    assert curve["step"] == [1, 2] and curve["mean"] == [3.0, 2.0]
    assert curve["std"] == [pytest.approx(math.sqrt(2.0))] * 2


def test_score_heldout_on_hand_made_answers():
    rows = [{"instruction": "q1", "answer": "28.2"}, {"instruction": "q2", "answer": "393"},
            {"instruction": "q3", "answer": "10"}]
    outputs = ["12 * 2.35 = 28.2\nThe answer is 28.2.", "131 * 3 = 390\nThe answer is 390.", "I do not know."]
    scored, summary = score_heldout(rows, outputs)
    assert [r["correct"] for r in scored] == [True, False, False]
    assert [r["answer"] for r in scored] == ["28.2", "390", None]
    assert summary["n"] == 3 and summary["exact_acc"] == pytest.approx(1 / 3)
    assert summary["answered"] == pytest.approx(2 / 3)
    assert summary["mae"] == pytest.approx(3 / 2)  # over the 2 answered rows: |28.2-28.2|, |390-393|
    assert summary["log_mae"] == pytest.approx(abs(math.log(391) - math.log(394)) / 2)


def test_generated_programs_print_their_answers_and_splits_are_disjoint():
    train, heldout = make_splits(300, 60, seed=5)
    assert make_splits(300, 60, seed=5) == (train, heldout)  # deterministic
    assert not {r["instruction"] for r in train} & {r["instruction"] for r in heldout}
    assert {r["style"] for r in train} == {"steps", "program"}
    assert any("." in r["answer"] for r in train) and any("." not in r["answer"] for r in train)
    for row in train + heldout:
        assert row["output"].endswith(f"The answer is {row['answer']}.")
        if row["style"] == "program":
            assert row["instruction"].endswith("Let's write a program.")
            code = row["output"].split("```python\n")[1].split("\n```")[0]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(code, {})
            assert Decimal(printed.getvalue().strip()) == Decimal(row["answer"]), row
    assert len(make_rows(20, seed=1, program_share=0.0)) == 20


def _results(del_values, mle_values):
    return {"model": "m", "seeds": [0, 1, 2], "reference": {}, "config": {},
            "losses": {"del": {"exact_acc": aggregate(del_values), "tf_digit_entropy": aggregate([0.5])},
                       "mle": {"exact_acc": aggregate(mle_values), "tf_digit_entropy": aggregate([0.4])}}}


def test_verdict_is_computed_from_the_numbers():
    clear = _results([0.50, 0.52, 0.54], [0.30, 0.31, 0.32])
    found = compare(clear, "exact_acc", "del", "mle")
    assert found["diff"] == pytest.approx(21.0)
    assert found["se"] == pytest.approx(100 * math.sqrt(0.02 ** 2 / 3 + 0.01 ** 2 / 3))
    assert found["verdict"] == "better"
    assert "+21.0 points" in verdicts(clear)[0] and "DEL is better than MLE here" in verdicts(clear)[0]
    noisy = _results([0.50, 0.20, 0.80], [0.45, 0.15, 0.75])
    assert compare(noisy, "exact_acc", "del", "mle")["verdict"] == "unclear"
    worse = _results([0.30, 0.31, 0.32], [0.50, 0.52, 0.54])
    assert "DEL is worse than MLE here" in verdicts(worse)[0]
    table = markdown(clear)
    assert "| del | 3 | 52.0 ± 2.0 |" in table and "| mle | 3 | 31.0 ± 1.0 |" in table


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(StudyError, match="unknown key 'stepz'"):
        load_study_config(CPU_CONFIG, ["stepz=3"])
    with pytest.raises(StudyError, match="'seed' is set by the study"):
        load_study_config(CPU_CONFIG, ["seed=3"])
    with pytest.raises(StudyError, match="losses: unknown"):
        load_study_config(CPU_CONFIG, ["losses=mle,nope"])
    config = load_study_config(CPU_CONFIG, ["max_steps=3", "losses=mle,del", "seeds=0,1"])
    assert config.losses == ("mle", "del") and config.seeds == (0, 1) and config.train["max_steps"] == 3
    args = train_overrides(config, "del", 1, tmp_path / "run")
    assert "max_steps=3" in args and "loss=del" in args and "seed=1" in args and "eval_generate=0" in args


# --- the whole study, twice ---------------------------------------------------------------------
def _study(args, timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    started = time.time()
    proc = subprocess.run([sys.executable, str(STUDY), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"study.py exited {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    return proc, time.time() - started


def test_study_smoke_two_losses_one_seed_then_resume(tmp_path):
    from train_helpers import make_tiny_qwen2

    root = shared_dir()
    if root is None:
        pytest.skip("shared material not found: set DEL_SHARED_DIR")
    model = make_tiny_qwen2(tmp_path / "tiny-qwen2", real_tokenizer("qwen2"))
    out = tmp_path / "study"
    args = [str(CPU_CONFIG), "--model", str(model), "--losses", "mle,del", "--seeds", "0", "--output_root", str(out),
            "--max_steps", "2", "--global_batch_size", "4", "--micro_batch_size", "4", "--lr", "1e-3",
            "--train_size", "24", "--heldout_size", "4", "--heldout_generate", "3", "--heldout_max_new_tokens", "6",
            "--benchmark-dir", str(root / "data" / "benchmarks"), "--benchmark_limit", "2",
            "--benchmark_max_new_tokens", "8", "--threads", "1", "--cache_dir", str(tmp_path / "cache")]
    first, _ = _study(args)
    assert "3/3 del seed 0" in first.stdout and "ETA" in first.stdout
    assert first.stdout.count("trained in") == 2

    results = json.loads((out / "results.json").read_text())
    assert set(results["losses"]) == {"mle", "del"}
    for loss, per in results["losses"].items():
        run = results["runs"][loss]["0"]
        for key in ("exact_acc", "answered", "tf_number_acc", "tf_digit_entropy", "tf_ce", "gsm8k_acc", "svamp_acc",
                    "bench_macc", "train_time_s"):
            assert per[key]["n"] == 1 and per[key]["std"] is None, (loss, key)
            assert math.isfinite(per[key]["mean"]) and per[key]["mean"] == run[key], (loss, key)
        assert per["tf_digit_entropy"]["mean"] > 0 and 0 <= per["exact_acc"]["mean"] <= 1
        assert results["curves"][loss]["step"] == [1, 2] and all(map(math.isfinite, results["curves"][loss]["mean"]))
    assert math.isfinite(results["reference"]["tf_digit_entropy"]) and "exact_acc" in results["reference"]
    assert any(line.startswith("DEL vs MLE (held-out exact-number accuracy)") for line in results["verdict"])
    for name in ("mle", "del"):  # evaluate.py's outputs for 2 + 2 questions
        assert json.loads((out / name / "seed0" / "heldout" / "summary.json").read_text())["n"] == 3
        bench = json.loads((out / name / "seed0" / "benchmarks" / "summary.json").read_text())
        assert {b: s["n"] for b, s in bench["benchmarks"].items()} == {"gsm8k": 2, "svamp": 2}
    table = (out / "results.md").read_text()
    assert "| pretrained (reference) |" in table and "| mle | 1 |" in table and "| del | 1 |" in table
    assert "DEL vs MLE" in table
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    metrics = {name: (out / name / "seed0" / "metrics.jsonl").stat().st_mtime_ns for name in ("mle", "del")}
    second, seconds = _study(args)
    assert second.stdout.count("skipped") >= 3 and "trained in" not in second.stdout
    assert "training skipped" in second.stdout and "[run]" not in second.stdout
    assert {name: (out / name / "seed0" / "metrics.jsonl").stat().st_mtime_ns for name in metrics} == metrics
    assert json.loads((out / "results.json").read_text())["losses"] == results["losses"]
    assert seconds < 60
