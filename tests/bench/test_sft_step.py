"""tests/bench/sft_step.py: its SFT rows have the asked prompt share and varied lengths, its
same-work check flags a side that trained other tokens, and end to end in its --quick shapes every
side runs (the trainer with and without its SFT options, transformers.Trainer, TRL's SFTTrainer
with and without padding_free) on the same target tokens per step, with finite ratios."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

from helpers.scripts import script_module
from helpers.training import REPO, make_tiny_qwen2

SCRIPT = REPO / "tests" / "bench" / "sft_step.py"
sft_step = script_module(SCRIPT, "sft_step")


@pytest.mark.slow
@pytest.mark.parametrize("share", [0.5, 0.8])
def test_the_rows_have_the_asked_prompt_share_and_varied_lengths(tmp_path, qwen2_tokenizer, share):
    from del_core.data.tokenized import encode

    path = tmp_path / "rows.jsonl"
    shape = sft_step.write_sft_rows(path, 32, share, 384, qwen2_tokenizer)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    lengths = [len(encode(row, qwen2_tokenizer, 10_000).input_ids) for row in rows]
    assert len(rows) == 32 and max(lengths) <= 384  # nothing is cut by the trainer's max_length
    assert (shape.shortest, shape.longest) == (min(lengths), max(lengths))
    assert max(lengths) - min(lengths) > 384 // 4  # a micro-batch of them holds padding
    assert shape.ignored_share == pytest.approx(share, abs=0.05)
    assert all(any(ch.isdigit() for ch in row["output"]) for row in rows)
    again = sft_step.write_sft_rows(tmp_path / "again.jsonl", 32, share, 384, qwen2_tokenizer)
    assert again == shape and (tmp_path / "again.jsonl").read_text() == path.read_text()  # seeded


def _run(side: str, targets: list[int], round_index: int = 0):
    result = sft_step.RunResult(side, "del", 1, round_index, 1.0, 1.0, 1.0, 1.0, None, {}, targets)
    return sft_step.ShareRun(0.8, result)


def test_the_same_work_check_flags_a_side_with_other_target_tokens():
    same = [_run(side, [10, 12]) for side in ("trainer", "hf", "trl")]
    assert sft_step.work_differences(same) == []
    other = [*same[:2], _run("trl", [10, 11])]
    (line,) = sft_step.work_differences(other)
    assert line.startswith("round 1, prompt share 0.8, del:") and '"trl": [10, 11]' in line
    # a cell is a round: the same tokens in another round are no difference
    assert sft_step.work_differences([*same, _run("hf", [9, 9], round_index=1)]) == []


def test_the_ratios_pair_each_side_with_hf_per_round():
    rng = random.Random(0)
    runs = []
    for round_index in range(3):
        step = rng.uniform(1, 2)  # a round's drift, the same on both sides
        for side, scale in (("hf", 1.0), ("trainer", 0.5)):
            result = sft_step.RunResult(side, "mle", 1, round_index, step * scale, step, 2 * scale, 1.0, None, {}, [5])
            runs.append(sft_step.ShareRun(0.5, result))
    rows = {row["side"]: row for row in sft_step.cell_rows(runs, 0.5, "mle")}
    ratio = rows["trainer"]["time_ratio"]
    assert ratio["median"] == ratio["min"] == ratio["max"] == pytest.approx(0.5)  # paired: the drift cancels
    assert rows["trainer"]["memory_ratio"]["median"] == pytest.approx(0.5)
    assert rows["hf"]["time_ratio"]["median"] == 1.0 and rows["trainer"]["rounds"] == 3


@pytest.mark.launches
@pytest.mark.slow
def test_quick_run_trains_every_side_on_the_same_target_tokens(tmp_path, qwen2_tokenizer):
    model = make_tiny_qwen2(tmp_path / "tiny", qwen2_tokenizer)
    out = tmp_path / "runs.json"
    command = [sys.executable, str(SCRIPT), "--quick", "--rounds=1", "--losses=del", "--prompt-share=0.8"]
    command += [f"--model={model}", f"--cache={tmp_path / 'cache'}", f"--json={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "| side | step s | time ratio side/hf | cpu-time ratio side/hf | peak GB | mem ratio side/hf" in proc.stdout
    assert "Same work: in every (round, prompt share, loss) every side trained the same target tokens" in proc.stdout
    saved = json.loads(out.read_text())
    runs = saved["runs"]
    assert [r["side"] for r in runs] == list(sft_step.SIDES)  # every side ran, none was skipped
    assert {(r["loss"], r["prompt_share"], r["nproc"]) for r in runs} == {("del", 0.8, 1)}
    targets = {r["side"]: r["step_targets"] for r in runs}
    assert len(targets["hf"]) == 4 and all(n > 0 for n in targets["hf"])  # --quick: 4 steps
    assert all(side_targets == targets["hf"] for side_targets in targets.values())  # the same work
    for run in runs:
        assert run["step_s"] > 0 and run["peak_gb"] > 0 and math.isfinite(run["cpu_s"])
    shares = sft_step.ShareRun
    rows = sft_step.cell_rows([shares.from_record(r) for r in runs], 0.8, "del")
    assert [row["side"] for row in rows] == list(sft_step.SIDES)
    for row in rows:
        assert all(math.isfinite(row[key]["median"]) for key in ("time_ratio", "cpu_time_ratio", "memory_ratio"))
    (share_text,) = saved["shapes"].values()
    assert share_text.startswith("prompt share 0.8:")
