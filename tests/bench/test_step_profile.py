"""tests/bench/step_profile.py end to end in its --quick shapes: one round of DEL in one process
(gloo; the multi-process cells launch the same worker through torchrun), the trainer against
DELTrainer; the table has its rows and ratio columns."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from helpers.training import REPO, make_tiny_qwen2

SCRIPT = REPO / "tests" / "bench" / "step_profile.py"


@pytest.mark.launches
@pytest.mark.slow
def test_quick_profile_prints_the_comparison_and_the_phase_split(tmp_path, qwen2_tokenizer):
    model = make_tiny_qwen2(tmp_path / "tiny", qwen2_tokenizer)
    out = tmp_path / "runs.json"
    command = [sys.executable, str(SCRIPT), "--quick", "--rounds=1", "--nprocs=1", "--losses=del"]
    command += [f"--model={model}", f"--cache={tmp_path / 'cache'}", f"--json={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    table = proc.stdout
    assert "| loss | procs | trainer step s | hf step s | time ratio trainer/hf | cpu-time ratio trainer/hf" in table
    assert "| trainer peak GB | hf peak GB | mem ratio trainer/hf |" in table
    assert table.count("| del | 1 |") == 3  # the comparison, the phase split's wall and CPU rows
    assert "| clock | data | counts | forward | loss | engine | backward | optimizer | read | logging |" in table
    assert "DeepSpeed config the engines got, trainer vs hf: the same" in table
    runs = json.loads(out.read_text())
    assert [(r["side"], r["loss"], r["nproc"]) for r in runs] == [("trainer", "del", 1), ("hf", "del", 1)]
    for run in runs:
        assert run["step_s"] > 0 and run["peak_gb"] > 0 and math.isfinite(run["cpu_s"])
    trainer = runs[0]
    phases = trainer["phases"]["wall"]
    assert phases["forward"] > 0 and phases["backward"] > 0 and phases["optimizer"] > 0
    # the timed phases and the remainder add up to the step (medians of each: not exactly)
    assert sum(phases.values()) == pytest.approx(trainer["step_s"], rel=0.5)
