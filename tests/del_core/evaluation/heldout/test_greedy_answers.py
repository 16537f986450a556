"""Held-out answers scored by the project's one answer reader (del_core.evaluation.heldout.greedy_answers), on
hand-made outputs: the gold is read from the reference output by the same rule as the model's."""

from __future__ import annotations

import math

import pytest

from del_core.evaluation.answers.numbers import numbers_match
from del_core.evaluation.heldout.greedy_answers import HeldOutSummary, answer_accuracy, reference_answer, score_heldout


def test_reference_answer_uses_the_same_reader_as_outputs():
    gold = reference_answer({"output": "12 * 3 = 36\nThe answer is 1,234.50."})
    assert gold == "1,234.50" and numbers_match("1234.5", gold)
    assert reference_answer({"output": "so x = 7", "answer": "8"}) == "8"  # an explicit answer wins
    assert reference_answer({"output": "so x = 7", "answer": 8}) == "8"
    assert reference_answer({"output": "x = .5"}) == ".5"  # no "The answer is": the last number
    assert reference_answer({"output": "no numbers here"}) is None


def test_heldout_answers_are_scored_by_value():
    rows = [
        {"instruction": "a", "output": "The answer is 42."},
        {"instruction": "b", "output": "The answer is 3.5."},
        {"instruction": "c", "output": "The answer is 10."},
    ]
    # "The answer is" wins over a later number; 3.50 equals 3.5; no number is unanswered
    outputs = ["The answer is 42. Check: 6 * 7 = 42, then 43", "3.50", "I cannot tell"]
    scored, summary = score_heldout(rows, outputs)
    assert [r["correct"] for r in scored] == [True, True, False] and scored[2]["unanswered"]
    assert [r["answer"] for r in scored] == ["42", "3.50", None] and [r["gold"] for r in scored] == ["42", "3.5", "10"]
    assert summary.n == 3 and summary.exact_acc == pytest.approx(2 / 3)
    assert summary.answered == pytest.approx(2 / 3) and summary.mae == 0.0
    assert answer_accuracy(rows[:2], ["It is 42", "3.50"]) == 1.0
    assert answer_accuracy(rows[:2], ["41", "nothing"]) == 0.0
    assert answer_accuracy([], []) == 0.0
    with pytest.raises(ValueError, match="2 rows but 1 outputs"):
        score_heldout(rows[:2], ["1"])


def test_gold_from_the_reference_output_matches_by_value_not_by_text():
    rows = [
        {"instruction": "a", "output": "7 + 5 = 12\nThe answer is 12.0."},
        {"instruction": "b", "output": "2 * 3 = 6, so 6 + 1 = 7"},  # no "The answer is": its last number, 7
        {"instruction": "c", "output": "The answer is 1,234."},
        {"instruction": "d", "output": "nothing to check"},  # no gold: never right
    ]
    outputs = ["The answer is 12", "first 6, then 7", "The answer is 1234.", "The answer is 3."]
    scored, summary = score_heldout(rows, outputs)
    assert [r["correct"] for r in scored] == [True, True, True, False]
    assert [r["gold"] for r in scored] == ["12.0", "7", "1,234", None]
    # an answer, then a later number: the answer counts (a last-number rule would read 13 and be wrong)
    assert answer_accuracy(rows[:1], ["The answer is 12. Next: 13"]) == 1.0
    assert answer_accuracy(rows[:1], ["12 was a guess; it is 13"]) == 0.0  # last number 13
    assert summary.n == 4 and summary.exact_acc == 0.75 and summary.answered == 1.0


def test_summary_is_a_dataclass_with_the_numeric_errors():
    rows = [{"instruction": "q1", "answer": "28.2"}, {"instruction": "q2", "answer": "393"}]
    scored, summary = score_heldout(rows, ["The answer is 28.2.", "The answer is 390."])
    assert isinstance(summary, HeldOutSummary) and [r["correct"] for r in scored] == [True, False]
    assert summary.mae == pytest.approx(3 / 2) and summary.log_mae == pytest.approx(
        abs(math.log(391) - math.log(394)) / 2
    )
    # places of the gold: 28.2 all right; 393 vs 390 wrong at 10^0 only
    assert summary.digit_acc == {"10^2": 1.0, "10^1": 1.0, "10^0": 0.5, "10^-1": 1.0}
    assert summary.to_json() == {
        "n": 2,
        "exact_acc": 0.5,
        "answered": 1.0,
        "mae": summary.mae,
        "log_mae": summary.log_mae,
        "digit_acc": summary.digit_acc,
    }
    assert score_heldout([], []) == ([], HeldOutSummary(0, None, None, None, None, {}))
