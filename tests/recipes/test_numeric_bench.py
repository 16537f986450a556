"""recipes/numeric_bench.py end to end on its smoke configuration (< 2 minutes): the pipeline
produces the table, MLE beats the untrained model, a second invocation resumes without re-running,
and a changed result-affecting key is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.shared import REPO

pytestmark = pytest.mark.launches

BENCH = REPO / "recipes" / "numeric_bench.py"
SMOKE = REPO / "recipes" / "configs" / "numeric-bench-smoke.yaml"


def bench(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, str(BENCH), str(SMOKE), *overrides]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def smoke_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench") / "smoke"
    proc = bench(f"output_root={root}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, proc


def run_results(root, phase: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "runs" / phase).glob("*.json"))]


def test_smoke_produces_the_table_and_mle_beats_the_untrained_model(smoke_root):
    root, proc = smoke_root
    report = (root / "report.md").read_text()
    assert report in proc.stdout and (root / "report.png").stat().st_size > 10_000
    for row in ("| untrained | - |", "| mle | - |", "| del | 0.128 |", "| ntil | 0.3 |", "## Lambda selection"):
        assert row in report, row
    assert "(no difference)" in report or "(better)" in report or "(worse)" in report
    trained, untrained = run_results(root, "test"), run_results(root, "untrained")
    assert len(trained) == 10 and len(untrained) == 2 and len(run_results(root, "select")) == 4
    mle = {r["spec"]["seed"]: r["evals"]["test"] for r in trained if r["spec"]["loss"] == "mle"}
    floor = {r["spec"]["seed"]: r["evals"]["test"] for r in untrained}
    for seed in (0, 1):
        assert mle[seed]["tf_ce"] < floor[seed]["tf_ce"] - 0.3, (mle[seed], floor[seed])
        assert mle[seed]["log_mae"] < floor[seed]["log_mae"], (mle[seed], floor[seed])
    summary = json.loads((root / "summary.json").read_text())["summary"]
    cell = summary["del"]["test"]["exact_acc"]
    assert {"mean", "half_width", "diff", "diff_half_width", "verdict"} <= cell.keys()


def test_a_second_invocation_resumes_and_a_changed_key_is_refused(smoke_root):
    root, _ = smoke_root
    stamps = {p: p.stat().st_mtime_ns for p in (root / "runs").rglob("*.json")}
    again = bench(f"output_root={root}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in (root / "runs").rglob("*.json")} == stamps  # nothing re-run
    changed = bench(f"output_root={root}", "steps=61")
    assert changed.returncode == 2 and "['steps']" in changed.stderr and "another output_root" in changed.stderr
