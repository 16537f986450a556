"""del_core.training.heldout.summary: the before -> after exact answers with their paired interval, the
side-by-side table and the per-problem answer records, on hand-made outputs."""

from __future__ import annotations

import math

import pytest

from del_core.training.heldout.summary import answer_change, answer_records, side_by_side

ROWS = [{"instruction": f"What is {a} plus {b}?", "output": f"The answer is {a + b}.", "answer": str(a + b)}
        for a, b in ((10, 5), (20, 7), (31, 4), (40, 2))]  # fmt: skip
BEFORE = ["The answer is 15.", "I think 26", "To add them, we", "The answer is 42."]
AFTER = ["The answer is 15.", "The answer is 27.", "The answer is 35.", "The answer is 41."]


def test_answer_change_counts_and_pairs_the_problems():
    change = answer_change(ROWS, BEFORE, AFTER)
    assert (change.n, change.before_correct, change.after_correct, change.fixed, change.broken) == (4, 2, 3, 2, 1)
    # per-problem differences 0, +1, +1, -1: mean 0.25, sd sqrt(11/12), t(0.975, 3) = 3.182
    assert change.difference.mean == pytest.approx(0.25)
    assert change.difference.half_width == pytest.approx(3.182 * math.sqrt(11 / 12) / 2)
    text = change.describe()
    assert text.startswith("before 2/4 (50.0%) -> after 3/4 (75.0%): +25.0 points, 95% CI [-127.3, +177.3]")
    assert text.endswith("2 fixed, 1 broken")


def test_side_by_side_reads_and_marks_each_answer():
    lines = side_by_side(ROWS, BEFORE, AFTER)
    assert lines[0].split() == ["question", "reference", "before", "after"]
    assert lines[2].split()[-5:] == ["27", "26", "x", "27", "ok"]
    assert lines[3].split()[-5:] == ["35", "(none)", "x", "35", "ok"]
    assert lines[4].split()[-5:] == ["42", "42", "ok", "41", "x"]
    without_before = side_by_side(ROWS, [], AFTER)
    assert without_before[0].split() == ["question", "reference", "after"]
    assert without_before[4].split()[-3:] == ["42", "41", "x"]


def test_answer_records_keep_every_output():
    records = answer_records(ROWS, BEFORE, AFTER)
    assert records[3] == {
        "index": 3,
        "question": "What is 40 plus 2?",
        "reference": "42",
        "before": "The answer is 42.",
        "before_answer": "42",
        "before_correct": True,
        "after": "The answer is 41.",
        "after_answer": "41",
        "after_correct": False,
    }
    assert "before" not in answer_records(ROWS, [], AFTER)[0]
