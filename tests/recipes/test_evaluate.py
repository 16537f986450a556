"""recipes/evaluate.py end to end: a tiny random Qwen2 model (real Qwen2 tokenizer) on 5 questions of
every benchmark on CPU, and the score_only command line."""

import json
import os
import subprocess
import sys

import pytest

from del_core.data.prompting import format_prompt
from del_core.evaluation.answers.scoring import is_correct
from del_core.evaluation.benchmarks.config import load_eval_config
from del_core.evaluation.benchmarks.files import load_benchmark
from del_core.evaluation.benchmarks.prompts import CHOICE_RESPONSE_PREFIX, PROGRAM_SUFFIX
from del_core.evaluation.benchmarks.runner import run
from del_core.evaluation.question import BENCHMARKS
from helpers.shared import REPO, real_tokenizer
from helpers.training import make_tiny_qwen2

pytestmark = pytest.mark.launches


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A training output directory: OUTPUT_DIR/final holds a tiny random Qwen2 in HF format."""
    path = tmp_path_factory.mktemp("tiny-qwen2-run")
    make_tiny_qwen2(path / "final", real_tokenizer("qwen2"), kv_heads=1, hidden=16, layers=1, heads=2)
    return path


def test_tiny_model_runs_every_benchmark_end_to_end(tiny_model_dir, data_dir, tmp_path, capsys):
    out_dir = tmp_path / "eval"
    config = load_eval_config(
        [
            str(tiny_model_dir),
            f"data_dir={data_dir}",
            "limit=5",
            "backend=hf",
            "max_new_tokens=8",
            "batch_size=8",
            "threads=2",
            "workers=2",
            f"output_dir={out_dir}",
        ]
    )
    code = run(config)
    assert code == 0
    rows = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert [(r["benchmark"], r["index"]) for r in rows] == [(b, i) for b in BENCHMARKS for i in range(5)]
    records = {(r.benchmark, r.index): r for b in BENCHMARKS for r in load_benchmark(b, data_dir, 5)}
    for row in rows:
        record = records[(row["benchmark"], row["index"])]
        assert row["gold"] == record.gold and row["correct"] == is_correct(row["answer"], record)
        assert row["unanswered"] == (row["answer"] is None)
        if record.kind == "choice":
            assert row["mode"] == "cot" and row["prompt"] == format_prompt(record.question) + CHOICE_RESPONSE_PREFIX
        else:
            assert row["mode"] in ("pot", "cot_retry")
            program_prompt = row["prompt"] if row["mode"] == "pot" else row["program_attempt"]["prompt"]
            assert program_prompt == format_prompt(record.question + PROGRAM_SUFFIX)
            if row["mode"] == "cot_retry":
                assert row["prompt"] == format_prompt(record.question)
    first = rows[0]["prompt"] if rows[0]["mode"] == "pot" else rows[0]["program_attempt"]["prompt"]
    assert first.startswith("Below is an instruction that describes a task.") and first.endswith(
        "Let's write a program.\n\n### Response:\n"
    )
    assert set(summary["benchmarks"]) == set(BENCHMARKS)
    for name, stats in summary["benchmarks"].items():
        mine = [r for r in rows if r["benchmark"] == name]
        assert stats["n"] == 5 and stats["correct"] == sum(r["correct"] for r in mine)
        assert stats["unanswered"] == sum(r["unanswered"] for r in mine)
    assert summary["mACC"] == pytest.approx(sum(s["accuracy"] for s in summary["benchmarks"].values()) / 7)
    assert summary["config"]["resolved_model"] == str(tiny_model_dir / "final")
    assert summary["config"]["backend"] == "hf"
    table = capsys.readouterr().out
    assert "mACC" in table and all(name in table for name in BENCHMARKS)


def _evaluate(args):
    """recipes/evaluate.py ARGS as a subprocess (a fresh interpreter, as users run it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, str(REPO / "recipes" / "evaluate.py"), *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _score_only(tmp_path, rows, data_dir):
    pred, out = tmp_path / "pred.jsonl", tmp_path / "out.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return _evaluate([f"score_only={pred}", f"data_dir={data_dir}", f"output={out}"]), out


def test_score_only_command_line(tmp_path, data_dir):
    rows = [
        {"benchmark": "gsm8k", "index": 0, "output": "She sells 9 eggs, 9 * 2 = 18. The answer is 18."},
        {"benchmark": "gsm8k", "index": 1, "output": "The answer is 4."},  # gold 3
        {"benchmark": "gsm8k", "index": 1, "output": "bolts = 2 + 2 / 2\nprint(bolts)"},  # a program: prints 3.0
        {"benchmark": "simuleq", "index": 0, "output": "novelists = 15\npoets = 9\nprint(novelists, poets)"},
        {"benchmark": "math", "index": 2, "output": "Thus $x = \\boxed{\\dfrac{9}{7}}$."},
        {"benchmark": "math", "index": 0, "output": "The answer is $3$."},  # gold 2
        {"benchmark": "aqua", "index": 0, "output": "I am not sure."},  # unanswered, never "A"
        {"benchmark": "mmlu_mathematics", "index": 0, "output": "24 = 2p so p = 12. The answer is (C)."},
    ]
    done, out = _score_only(tmp_path, rows, data_dir)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["correct"] for r in scored] == [True, False, True, True, True, False, False, True]
    assert [r["answer"] for r in scored] == ["18", "4", "3.0", ["15", "9"], "\\dfrac{9}{7}", "3", None, "C"]
    assert [r["program_status"] for r in scored] == [None, None, "ok", "ok", None, None, None, None]
    assert all(r[k] == row[k] for r, row in zip(scored, rows) for k in row)
    benchmarks = summary["benchmarks"]
    assert {k: (v["n"], v["correct"], v["unanswered"]) for k, v in benchmarks.items()} == {
        "gsm8k": (3, 2, 0),
        "math": (2, 1, 0),
        "simuleq": (1, 1, 0),
        "aqua": (1, 0, 1),
        "mmlu_mathematics": (1, 1, 0),
    }
    assert summary["mACC"] == pytest.approx((2 / 3 + 1 / 2 + 1 + 0 + 1) / 5)
    numeric = summary["numeric"]  # pairs: (18,18) (4,3) (3,3) (15,15) (9/7,9/7) (3,2)
    assert numeric["n"] == 6 and numeric["mae"] == pytest.approx(2 / 6)
    assert numeric["digit_acc"] == {"10^1": 1.0, "10^0": pytest.approx(4 / 6)}


def test_score_only_names_the_bad_row(tmp_path, data_dir):
    done, _ = _score_only(
        tmp_path,
        [{"benchmark": "gsm8k", "index": 0, "output": "1"}, {"benchmark": "gsm8k", "index": 5000, "output": "1"}],
        data_dir,
    )
    assert done.returncode == 2
    assert "pred.jsonl line 2: field 'index' is 5000, but gsm8k has 1319 questions (0..1318)" in done.stderr
    done, _ = _score_only(tmp_path, [{"benchmark": "gsm8k", "output": "1"}], data_dir)
    assert done.returncode == 2 and "pred.jsonl line 1: field 'index' missing or not int" in done.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["/nonexistent/model", "data_dir=."], "model /nonexistent/model: no such file or directory"),
        (["smollm2", "bakend=hf"], "unknown key 'bakend' (did you mean backend"),
        (["smollm2", "limit=0"], "limit must be >= 1"),
        (["score_only=pred.jsonl"], "score_only needs output=OUT.jsonl"),
    ],
)
def test_bad_options_are_one_line_errors(args, message):
    done = _evaluate(args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and message in done.stderr


def test_bad_input_stops_before_the_model_loads(tiny_model_dir, tmp_path):
    done = _evaluate([str(tiny_model_dir), f"data_dir={tmp_path / 'no-benchmarks'}"])
    assert (
        done.returncode == 2
        and done.stderr.strip() == f"error: benchmark directory not found: {tmp_path}/no-benchmarks"
    )
    assert "[evaluate]" not in done.stderr  # printed once the model is loaded
    pred = tmp_path / "pred.jsonl"
    pred.write_text('{"benchmark": "gsm8k", "index": 0, "output": "1"}\nnot json\n')
    done = _evaluate([f"score_only={pred}", f"data_dir={tmp_path}", f"output={tmp_path / 'o.jsonl'}"])
    assert done.returncode == 2 and done.stderr.startswith(f"error: {pred}: line 2: not valid JSON")


def test_help_lists_the_options():
    done = _evaluate(["--help"])
    assert done.returncode == 0 and "score_only=PRED.jsonl" in done.stdout and "max_new_tokens=N" in done.stdout
