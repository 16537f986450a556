"""Teacher-forced held-out metrics against hand-computed values, and held-out answer scoring with
the project's one answer reader."""

from __future__ import annotations

import math

import pytest
import torch

from del_core import DigitVocab, number_spans
from del_core.evaluation.heldout import answer_accuracy, reference_answer, score_heldout
from del_core.evaluation.numbers import numbers_match
from del_core.evaluation.teacher_forced import TEACHER_FORCED_SUMS, summarise, teacher_forced_sums


def _summary(logits, targets, vocab, spans=None):
    return summarise({k: float(v) for k, v in teacher_forced_sums(logits, targets, vocab, spans).items()})


def test_teacher_forced_sums_by_hand():
    vocab = DigitVocab(tuple(range(10)), 10)  # ids 0..9 are digits, 10 is '.'
    # one sequence: "1 2 x 3 . 4" -> numbers "12" and "3.4"; logits favour digit 1 everywhere
    targets = torch.tensor([[1, 2, 11, 3, 10, 4, -100]])
    logits = torch.zeros(1, 7, 12)
    logits[..., 1] = 2.0
    sums = teacher_forced_sums(logits, targets, vocab)
    assert set(sums) == set(TEACHER_FORCED_SUMS)
    metrics = summarise({k: float(v) for k, v in sums.items()})
    log_z = math.log(11 + math.exp(2))
    ce = [log_z - 2.0 if t == 1 else log_z for t in (1, 2, 11, 3, 10, 4)]
    assert metrics.ce == pytest.approx(sum(ce) / 6)
    assert (metrics.digits, metrics.numbers, metrics.tokens) == (4, 2, 6)
    assert metrics.digit_acc == pytest.approx(1 / 4)  # only the '1' is right
    assert metrics.number_acc == 0.0  # "12" has a wrong '2', "3.4" two wrong digits
    q = torch.softmax(torch.tensor([0.0, 2.0] + [0.0] * 8), 0)
    assert metrics.digit_entropy == pytest.approx(float(-(q * q.log()).sum()))
    targets2 = torch.tensor([[1, 11, 1, 1, -100, -100, -100]])  # "1" and "11": both right
    assert _summary(logits, targets2, vocab).number_acc == 1.0
    # precomputed spans give the same sums; without a vocabulary only CE is measured
    assert _summary(logits, targets, vocab, number_spans(targets, vocab)) == metrics
    plain = _summary(logits, targets, None)
    assert plain.ce == metrics.ce and plain.digits == 0 and plain.number_acc == 0.0


def test_numbers_of_two_sequences_are_counted_apart():
    vocab = DigitVocab(tuple(range(10)), 10)
    # "7" at the end of row 0 and "7" at the start of row 1 are two numbers, one wrong
    targets = torch.tensor([[11, 7], [7, 11]])
    logits = torch.zeros(2, 2, 12)
    logits[0, 1, 7] = 5.0  # row 0's 7 is predicted, row 1's is not (argmax 0 on ties)
    metrics = _summary(logits, targets, vocab)
    assert (metrics.numbers, metrics.number_acc, metrics.digit_acc) == (2, 0.5, 0.5)


def test_reference_answer_uses_the_same_reader_as_outputs():
    gold = reference_answer({"output": "12 * 3 = 36\nThe answer is 1,234.50."})
    assert gold == "1,234.50" and numbers_match("1234.5", gold)
    assert reference_answer({"output": "so x = 7", "answer": "8"}) == "8"
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
    assert summary.n == 3 and summary.exact_acc == pytest.approx(2 / 3)
    assert summary.answered == pytest.approx(2 / 3) and summary.mae == 0.0
    assert answer_accuracy(rows[:2], ["41", "nothing"]) == 0.0
    assert answer_accuracy([], []) == 0.0
    with pytest.raises(ValueError, match="2 rows but 1 outputs"):
        score_heldout(rows[:2], ["1"])
