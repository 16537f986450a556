"""`make demo` (recipes/loss_demo.py), end to end on a tiny random Qwen2 model with the real Qwen2 tokenizer."""
import re
from decimal import Decimal

import pytest

from conftest import real_tokenizer
from train_helpers import make_tiny_qwen2
from recipes import loss_demo
from recipes.synthetic_math import make_problems


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"), kv_heads=1, hidden=16,
                           layers=1, heads=2)


def test_demo_runs_end_to_end(tiny_model_dir, capsys):
    loss_demo.main(["--model", str(tiny_model_dir), "--eval-problems", "3", "--steps", "2", "--batch-size", "2", "--threads", "2"])
    out = capsys.readouterr().out
    assert "Digit vocabulary (single-digit): '0'..'9' = [15, 16, 17, 18, 19, 20, 21, 22, 23, 24], '.' = 13" in out
    for name in ("mle", "mixce", "emo", "ntl_was", "ntl_mse", "dist2", "del"):
        row = re.search(rf"^\s+{name}\s+([-\d.]+)\s+([-\d.]+)", out, re.M)
        assert row and all(abs(float(v)) < 100 for v in row.groups()), name
    assert "[del] step   2/2" in out and "[mle] step   2/2" in out
    assert re.search(r"^\s+del\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$", out, re.M)


def test_synthetic_problems_are_exact_and_seeded():
    rows = make_problems(50, seed=7)
    assert rows == make_problems(50, seed=7) and rows != make_problems(50, seed=8)
    for row in rows:
        step, final = row["output"].split("\n")
        assert final == f"The answer is {row['answer']}."
        lhs, rhs = step.split(" = ")
        op = lhs.split(" ")[1]
        terms = [Decimal(t) for t in lhs.split(" ")[::2]]
        expected = {"+": sum(terms), "-": terms[0] - terms[1], "*": terms[0] * terms[1], "/": terms[0] / terms[1]}[op]
        assert Decimal(rhs) == expected and Decimal(row["answer"]) == expected
