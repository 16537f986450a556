"""recipes/evaluate.py on a machine where bubblewrap cannot run (here: PATH without bwrap, so the
real probe finds none): a program-of-thought benchmark is refused in one error line naming why and
the fixes, before any model loads, unless the weaker layer is chosen on purpose (``sandbox=basic``,
or ``DEL_SANDBOX_ACCEPT_BASIC=1`` for batch jobs); multiple-choice benchmarks, which run no
program, run either way. The same refusal inside a container whose bwrap really fails:
tests/container/test_image.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.shared import REPO, real_tokenizer
from helpers.training import make_tiny_qwen2

pytestmark = pytest.mark.launches

PROGRAM_ROW = {"benchmark": "gsm8k", "index": 1, "output": "bolts = 2 + 2 / 2\nprint(bolts)"}  # prints 3.0, gold 3
CHOICE_ROWS = [
    {"benchmark": "aqua", "index": 0, "output": "I am not sure."},
    {"benchmark": "mmlu_mathematics", "index": 0, "output": "24 = 2p so p = 12. The answer is (C)."},
]
REFUSAL = (
    "error: generated programs run only in bubblewrap's namespaces, which cannot be created here: "
    "bwrap is not installed (not on PATH). Fix: install bubblewrap (apt-get install bubblewrap); in a "
    "container, let it create namespaces (podman run --security-opt unmask=/proc/*; docker run --security-opt "
    "systempaths=unconfined --security-opt seccomp=unconfined; launch/docker.sh: SANDBOX_NAMESPACES=1); or "
    "accept the weaker basic layer on purpose with sandbox=basic (DEL_SANDBOX_ACCEPT_BASIC=1 for batch jobs)"
)


def _evaluate_without_bwrap(tmp_path: Path, args: list, **env) -> subprocess.CompletedProcess:
    """recipes/evaluate.py ARGS with a PATH that holds no bwrap (an empty folder)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    environment = {k: v for k, v in os.environ.items() if k != "DEL_SANDBOX_ACCEPT_BASIC"}
    environment.update(PATH=str(empty), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **env)
    command = [sys.executable, str(REPO / "recipes" / "evaluate.py"), *args]
    return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)


def _score_only(tmp_path: Path, rows: list, data_dir: Path, *flags: str, **env):
    pred, out = tmp_path / "pred.jsonl", tmp_path / "out.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [f"score_only={pred}", f"data_dir={data_dir}", f"output={out}", *flags]
    return _evaluate_without_bwrap(tmp_path, args, **env), out


def _scored(out: Path) -> list:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_program_benchmark_is_refused_in_one_line_naming_why_and_the_fix(tmp_path, data_dir):
    done, out = _score_only(tmp_path, [PROGRAM_ROW, *CHOICE_ROWS], data_dir)
    assert done.returncode == 2 and done.stderr.splitlines() == [REFUSAL], done.stderr
    assert not out.exists()


def test_sandbox_basic_runs_the_program_without_a_warning(tmp_path, data_dir):
    done, out = _score_only(tmp_path, [PROGRAM_ROW, *CHOICE_ROWS], data_dir, "sandbox=basic")
    assert done.returncode == 0, done.stderr
    assert [(r["program_status"], r["answer"], r["correct"]) for r in _scored(out)] == [
        ("ok", "3.0", True),
        (None, None, False),
        (None, "C", True),
    ]
    assert "WARNING" not in done.stderr


def test_the_batch_variable_runs_the_program_with_one_warning(tmp_path, data_dir):
    done, out = _score_only(tmp_path, [PROGRAM_ROW], data_dir, DEL_SANDBOX_ACCEPT_BASIC="1")
    assert done.returncode == 0, done.stderr
    assert [(r["program_status"], r["answer"]) for r in _scored(out)] == [("ok", "3.0")]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING: sandbox:")]
    assert (
        len(warnings) == 1 and "bwrap is not installed" in warnings[0] and "DEL_SANDBOX_ACCEPT_BASIC=1" in warnings[0]
    )


def test_multiple_choice_and_text_answers_run_without_consent(tmp_path, data_dir):
    text_row = {**PROGRAM_ROW, "mode": "cot", "output": "The answer is 3."}  # read as text: no program runs
    done, out = _score_only(tmp_path, [*CHOICE_ROWS, text_row], data_dir)
    assert done.returncode == 0, done.stderr
    assert [(r["answer"], r["program_status"]) for r in _scored(out)] == [(None, None), ("C", None), ("3", None)]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny-qwen2")
    return make_tiny_qwen2(path, real_tokenizer("qwen2"), kv_heads=1, hidden=16, layers=1, heads=2)


@pytest.mark.slow
def test_with_a_model_program_benchmarks_stop_before_loading_and_choice_runs(tiny_model_dir, data_dir, tmp_path):
    common = [str(tiny_model_dir), f"data_dir={data_dir}", "limit=2", "max_new_tokens=4", "backend=hf", "threads=1"]
    refused = _evaluate_without_bwrap(tmp_path, [*common, "benchmarks=gsm8k,aqua", f"output_dir={tmp_path}"])
    assert refused.returncode == 2 and refused.stderr.splitlines() == [REFUSAL], refused.stderr
    choice = _evaluate_without_bwrap(tmp_path, [*common, "benchmarks=aqua,sat", f"output_dir={tmp_path / 'c'}"])
    assert choice.returncode == 0, choice.stderr
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert {name: stats["n"] for name, stats in summary["benchmarks"].items()} == {"aqua": 2, "sat": 2}
    chosen = [*common, "benchmarks=gsm8k", "sandbox=basic", f"output_dir={tmp_path / 'p'}"]
    assert _evaluate_without_bwrap(tmp_path, chosen).returncode == 0
    rows = [json.loads(line) for line in (tmp_path / "p" / "predictions.jsonl").read_text().splitlines()]
    assert [(r["benchmark"], r["index"]) for r in rows] == [("gsm8k", 0), ("gsm8k", 1)]
