"""Bad inputs stop the entry scripts with one line naming what is wrong, before anything heavy
loads and before anything is written: a negative lambda, a data row that is not
UTF-8, an empty predictions file for score_only (which never touches an existing output)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from helpers.shared import REPO
from helpers.training import run_train

pytestmark = pytest.mark.launches  # recipes/train.py runs; the scoring may start its sandbox


def _one_line_error(stderr: str, message: str) -> None:
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and lines[-1].startswith("error: ") and message in lines[-1], stderr[-3000:]


@pytest.mark.parametrize("case", ["negative lambda", "non-UTF-8 row"])
def test_train_refuses_before_loading_and_writing(case, tmp_path):
    out = tmp_path / "run"
    overrides = {"run.output_dir": out, "data": "synthetic:basic:40"}
    if case == "negative lambda":  # today: the model loads, then ValueError: del: weight must be >= 0
        overrides["loss.weight"] = -1.0
        message = "loss.weight must be >= 0, got -1.0"
    else:  # today: a 63-line traceback ending in DatasetGenerationError, a byte offset and no row
        data = tmp_path / "rows.jsonl"
        data.write_bytes(b'{"instruction": "1+1?", "output": "2"}\n{"instruction": "2+2?", "output": "4\xff"}\n')
        overrides["data"] = data
        message = f"{data}: row 2: not UTF-8 text (byte 37 of the line is 0xff)"
    proc = run_train(1, overrides, expect_rc=2, timeout=120)
    _one_line_error(proc.stderr, message)
    assert "[model]" not in proc.stdout and "[run]" not in proc.stdout  # nothing heavy started
    assert not out.exists()


def _evaluate_main():
    """recipes/evaluate.py's ``main`` (run in this process: the refusals come before any model)."""
    spec = importlib.util.spec_from_file_location("evaluate_recipe", REPO / "recipes" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_score_only_refuses_no_rows_and_keeps_the_output(tmp_path, data_dir, capsys):
    main = _evaluate_main()
    pred, out = tmp_path / "pred.jsonl", tmp_path / "scored.jsonl"
    args = [f"score_only={pred}", f"data_dir={data_dir}", f"output={out}", "sandbox=basic"]
    out.write_text('{"earlier": "result"}\n')
    for text in ("", "\n  \n"):  # today: exit 0, "mACC": null, and the output truncated to 0 bytes
        pred.write_text(text)
        assert main(args) == 2
        _one_line_error(capsys.readouterr().err, f"score_only file {pred} holds no rows (nothing to score)")
        assert out.read_text() == '{"earlier": "result"}\n'
    pred.write_text(json.dumps({"benchmark": "gsm8k", "index": 0, "output": "The answer is 18."}) + "\n")
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["mACC"] == 1.0
    assert [json.loads(line)["correct"] for line in out.read_text().splitlines()] == [True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.jsonl", "scored.jsonl"]  # no staging file left
