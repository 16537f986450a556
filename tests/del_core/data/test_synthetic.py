"""del_core.data.synthetic: the training problems (``data=synthetic:N``) are exact, seeded, and the
very rows they were before the study's generators were merged into this module; the basic set
(``synthetic:basic:N``), the spec's parsing and the synthetic held-out split."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from del_core.data import synthetic
from del_core.data.rows import DataError, SyntheticSpec, read_source
from del_core.data.splits import HELDOUT_SEED_OFFSET, separate_heldout
from del_core.data.synthetic import make_problems

# make_problems(12, seed=3)[0] and [4], computed with recipes/synthetic_math.py before the merge. Row 4
# keeps the training set's writing of a computed decimal ("3335.0" in the step, "3335" as the answer).
ROW_0 = {
    "instruction": "A tank holds 7867.8 liters of water. 7134.3 liters are used. How many liters are left?",
    "input": "",
    "output": "7867.8 - 7134.3 = 733.5\nThe answer is 733.5.",
    "answer": "733.5",
}
ROW_4 = {
    "instruction": "A tank holds 9499.8 liters of water. 6164.8 liters are used. How many liters are left?",
    "input": "",
    "output": "9499.8 - 6164.8 = 3335.0\nThe answer is 3335.",
    "answer": "3335",
}
ROW_3 = {"instruction": "Dev buys 32 pencils at $43.54 each. How much does Dev pay in total?", "input": "",
         "output": "32 * 43.54 = 1393.28\nThe answer is 1393.28.", "answer": "1393.28"}  # fmt: skip


def test_training_problems_are_the_rows_of_before_the_merge():
    rows = make_problems(12, seed=3)
    assert (rows[0], rows[3], rows[4]) == (ROW_0, ROW_3, ROW_4)
    assert make_problems(1, seed=0)[0]["output"] == "432.48 / 8 = 54.06\nThe answer is 54.06."


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


def _check_steps(row: dict) -> None:
    """The one step line of a row computes its answer exactly, and the final line states it."""
    step, final = row["output"].split("\n")
    assert final == f"The answer is {row['answer']}."
    lhs, rhs = step.split(" = ")
    a, op, b = lhs.split(" ")
    expected = {"+": Decimal(a) + Decimal(b), "-": Decimal(a) - Decimal(b), "*": Decimal(a) * Decimal(b)}[op]
    assert Decimal(rhs) == expected == Decimal(row["answer"])


def test_basic_problems_are_exact_integers_within_reach():
    rows = make_problems(300, seed=1, set_name="basic")
    for row in rows:
        _check_steps(row)
        assert "." not in row["answer"]  # meters with one decimal times 100 are whole centimeters
    for family in ("plus", "minus", "double", "each.", "gives away", "centimeters"):
        assert any(f" {family} " in row["instruction"] for row in rows), family
    assert rows == make_problems(300, seed=1, set_name="basic")


def test_make_problems_excludes_and_deduplicates_questions():
    plain = make_problems(40, seed=5, set_name="basic")
    banned = {plain[0]["instruction"], plain[3]["instruction"]}
    rows = make_problems(38, seed=5, set_name="basic", exclude=banned)
    assert rows == [row for row in plain if row["instruction"] not in banned][:38]
    distinct = make_problems(200, seed=5, set_name="basic", distinct=True)
    assert len({row["instruction"] for row in distinct}) == 200


def test_make_problems_says_when_a_set_runs_out_or_is_unknown(monkeypatch):
    doubles = synthetic.ProblemSet((synthetic._double,), synthetic.BASIC_SET.wording, synthetic.answer_text)
    monkeypatch.setitem(synthetic.PROBLEM_SETS, "doubles", doubles)
    assert len(make_problems(490, seed=0, set_name="doubles", distinct=True)) == 490  # 10..499: every one
    with pytest.raises(ValueError, match="problem set 'doubles': could not draw 491 rows with seed 0"):
        make_problems(491, seed=0, set_name="doubles", distinct=True)
    with pytest.raises(ValueError, match="unknown problem set 'nope'; choose from training, study, basic"):
        make_problems(1, set_name="nope")


def test_synthetic_spec_names_the_set_and_count():
    assert SyntheticSpec.parse("synthetic:12") == SyntheticSpec("training", 12)
    assert SyntheticSpec.parse("synthetic:basic:7").rows(seed=2) == make_problems(7, 2, "basic")
    for bad, message in (
        ("synthetic:0", "expected synthetic:N or synthetic:SET:N with N > 0"),
        ("synthetic:basic:x", "expected synthetic:N"),
        ("synthetic:a:b:3", "expected synthetic:N"),
        ("synthetic:easy:3", "unknown problem set 'easy'"),
    ):
        with pytest.raises(DataError, match=message):
            SyntheticSpec.parse(bad)


def test_synthetic_heldout_shares_no_question_with_training():
    train = read_source("synthetic:basic:2000", seed=0)
    held = separate_heldout("synthetic:basic:2000", "train", None, 300, seed=0)
    questions = {row["instruction"] for row in train}
    assert len(held) == 300 and len({row["instruction"] for row in held}) == 300
    assert not questions & {row["instruction"] for row in held}
    # The unfiltered draw of the same seed does repeat training questions: the exclusion is doing work.
    unfiltered = make_problems(300, seed=HELDOUT_SEED_OFFSET, set_name="basic")
    assert questions & {row["instruction"] for row in unfiltered}


def test_training_set_heldout_rows_are_unchanged_by_the_exclusion():
    # The README's held-out numbers were measured on these rows (no collision to exclude).
    held = separate_heldout("synthetic:320", "train", None, 48, seed=0)
    assert held == make_problems(48, seed=HELDOUT_SEED_OFFSET)


@pytest.mark.parametrize(
    "value, text",
    [
        ("28.20", "28.2"),
        ("36.00", "36"),
        ("0.50", "0.5"),
        ("3.5E+3", "3500"),
        ("1E+2", "100"),
        ("0.001", "0.001"),
        ("-1.50", "-1.5"),
        ("-12", "-12"),
        ("-0", "0"),
        ("-0.00", "0"),
        ("0E+3", "0"),
        ("0.000", "0"),
        ("1.25E-3", "0.00125"),
    ],
)
def test_answer_text_is_the_one_way_to_write_an_answer(value, text):
    assert synthetic.answer_text(Decimal(value)) == text


def test_the_benchmark_and_the_word_problems_share_one_problem_type():
    from del_core.experiments.numeric_bench import tasks

    assert tasks.Problem is synthetic.Problem and tasks.answer_text is synthetic.answer_text
    family, problem = synthetic.STUDY_SET.draw(random.Random(0))
    assert problem.family == family and problem.steps and problem.program
    (arithmetic,) = tasks.make_split("test", 1, 2, 0, ["add"])
    assert arithmetic.family == "add" and arithmetic.question.endswith("=") and arithmetic.steps == ()
