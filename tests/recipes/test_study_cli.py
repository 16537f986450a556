"""recipes/study.py end to end: a 2-step smoke run of the whole study (2 losses, 1 seed) on a tiny
random Qwen2 with the real Qwen2 tokenizer, run twice to check that it resumes.

The study itself (recipes/configs/study-cpu.yaml, ~80 min) is not run here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from helpers.shared import REPO, benchmark_dir, real_tokenizer
from helpers.training import make_tiny_qwen2

pytestmark = pytest.mark.launches

STUDY = REPO / "recipes" / "study.py"
CPU_CONFIG = REPO / "recipes" / "configs" / "study-cpu.yaml"


def _study(args, timeout=240):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    started = time.time()
    proc = subprocess.run(
        [sys.executable, str(STUDY), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"study.py exited {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
    return proc, time.time() - started


def test_a_bad_key_is_a_one_line_error_before_anything_runs(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [str(CPU_CONFIG), f"output_root={tmp_path / 'study'}", "optimizer.lrr=1"]
    proc = subprocess.run(
        [sys.executable, str(STUDY), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: command line: unknown key 'optimizer.lrr' (did you mean optimizer.lr,")
    assert not (tmp_path / "study").exists()


def test_study_smoke_two_losses_one_seed_then_resume(tmp_path):
    model = make_tiny_qwen2(tmp_path / "tiny-qwen2", real_tokenizer("qwen2"))
    out = tmp_path / "study"
    args = [str(CPU_CONFIG), f"model={model}", "losses=mle,del", "seeds=0", f"output_root={out}",
            "run.max_steps=2", "run.global_batch_size=4", "run.micro_batch_size=4", "optimizer.lr=1e-3",
            "train_size=24", "heldout_size=4", "heldout_generate=3", "heldout_max_new_tokens=6",
            "benchmarks=gsm8k,svamp", f"benchmark_dir={benchmark_dir()}",
            "benchmark_limit=2", "benchmark_max_new_tokens=8", "threads=1",
            f"model.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    first, _ = _study(args)
    assert "3/3 del seed 0" in first.stdout and "ETA" in first.stdout
    assert first.stdout.count("trained in") == 2

    results = json.loads((out / "results.json").read_text())
    assert set(results["losses"]) == {"mle", "del"}
    for loss, per in results["losses"].items():
        run = results["runs"][loss]["0"]
        for key in ("exact_acc", "answered", "tf_answer_acc", "tf_number_acc", "tf_digit_entropy", "tf_ce",
                    "gsm8k_acc", "svamp_acc", "bench_macc", "train_time_s"):  # fmt: skip
            assert per[key]["n"] == 1 and per[key]["std"] is None, (loss, key)
            assert math.isfinite(per[key]["mean"]) and per[key]["mean"] == run[key], (loss, key)
        assert per["tf_digit_entropy"]["mean"] > 0 and 0 <= per["exact_acc"]["mean"] <= 1
        assert results["curves"][loss]["step"] == [1, 2] and all(map(math.isfinite, results["curves"][loss]["mean"]))
    assert math.isfinite(results["reference"]["tf_digit_entropy"]) and "exact_acc" in results["reference"]
    assert any(line.startswith("del vs mle (teacher-forced answer accuracy)") for line in results["verdict"])
    [comparison] = [c for c in results["comparisons"] if c["metric"] == "tf_answer_acc"]
    assert comparison["over_seeds"]["n"] == 1 and comparison["verdict"] == "no difference"  # one seed: no interval
    assert comparison["over_problems"]["n"] == 4  # heldout_size problems, teacher-forced
    for name in ("mle", "del", "pretrained"):  # 4 rows teacher-forced, 3 greedy
        unit = out / name / "seed0" if name != "pretrained" else out / name
        summary = json.loads((unit / "heldout" / "summary.json").read_text())
        assert summary["n"] == 3 and summary["teacher_forced"]["n"] == 4
        assert len((unit / "heldout" / "teacher_forced.jsonl").read_text().splitlines()) == 4
    for name in ("mle", "del"):  # evaluate.py's outputs for 2 + 2 questions
        bench = json.loads((out / name / "seed0" / "benchmarks" / "summary.json").read_text())
        assert {b: s["n"] for b, s in bench["benchmarks"].items()} == {"gsm8k": 2, "svamp": 2}
        # asked as the runs were trained: the chat template with the study's empty system turn
        for row in map(json.loads, (out / name / "seed0" / "benchmarks" / "predictions.jsonl").open()):
            assert row["prompt"].startswith("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n"), row["prompt"]
    table = (out / "results.md").read_text()
    assert "| pretrained (reference) |" in table and "| mle | 1 |" in table and "| del | 1 |" in table
    assert "del vs mle" in table and "## Each loss vs MLE" in table
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    metrics = {name: (out / name / "seed0" / "metrics.jsonl").stat().st_mtime_ns for name in ("mle", "del")}
    second, seconds = _study(args)
    assert second.stdout.count("skipped") >= 3 and "trained in" not in second.stdout
    assert "training skipped" in second.stdout and "[run]" not in second.stdout
    assert {name: (out / name / "seed0" / "metrics.jsonl").stat().st_mtime_ns for name in metrics} == metrics
    assert json.loads((out / "results.json").read_text())["losses"] == results["losses"]
    assert seconds < 60
