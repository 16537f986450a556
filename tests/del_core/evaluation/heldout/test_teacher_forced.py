"""Teacher-forced held-out metrics (del_core.evaluation.heldout.teacher_forced) against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from del_core import DigitVocab, number_spans
from del_core.data.tokenized import Example
from del_core.evaluation.heldout.teacher_forced import (
    TEACHER_FORCED_SUMS,
    answer_hits,
    digit_hits,
    score_batch,
    score_examples,
    score_forced_answers,
    summarise,
    teacher_forced_sums,
)


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


def test_sums_are_named_float64_scalars_that_can_be_accumulated_in_place():
    vocab = DigitVocab(tuple(range(10)), 10)
    targets = torch.tensor([[11, 11, -100]])  # no digit: every digit and number sum is 0
    sums = teacher_forced_sums(torch.zeros(1, 3, 12), targets, vocab)
    assert list(sums) == list(TEACHER_FORCED_SUMS)
    assert all(v.dtype == torch.float64 and v.dim() == 0 for v in sums.values())
    sums["digits"] += 3  # one sum changed in place leaves the others alone
    assert float(sums["numbers"]) == 0.0 and float(sums["digit_hits"]) == 0.0
    plain = teacher_forced_sums(torch.zeros(1, 3, 12), targets, None)
    plain["digits"] += 1
    assert float(plain["numbers"]) == 0.0 and float(plain["right_numbers"]) == 0.0


def test_summarise_guards_empty_denominators():
    metrics = summarise(dict.fromkeys(TEACHER_FORCED_SUMS, 0.0))
    assert (metrics.ce, metrics.digit_acc, metrics.digit_entropy, metrics.number_acc) == (0.0, 0.0, 0.0, 0.0)
    metrics = summarise(
        {
            **dict.fromkeys(TEACHER_FORCED_SUMS, 0.0),
            "ce_sum": 6.0,
            "tokens": 3.0,
            "digit_hits": 1.0,
            "digits": 4.0,
            "entropy_sum": 2.0,
            "right_numbers": 1.0,
            "numbers": 2.0,
        }
    )
    assert (metrics.ce, metrics.digit_acc, metrics.digit_entropy, metrics.number_acc) == (2.0, 0.25, 0.5, 0.5)
    assert (metrics.tokens, metrics.digits, metrics.numbers) == (3.0, 4.0, 2.0)


def _entropy_of_one_peak(peak: float, classes: int) -> float:
    q = torch.softmax(torch.tensor([peak] + [0.0] * (classes - 1), dtype=torch.float64), 0)
    return float(-(q * q.log()).sum())


def test_multi_digit_tokens_are_scored_within_their_width_group():
    from helpers.toy_number_vocab import make_number_vocab

    case = make_number_vocab(3, V=1200)
    # "1234567.5x42" -> 123 456 7 . 5 x 42: two numbers, five number tokens. Every position's
    # logits peak at '456' (3.0), '7' (2.0) and '40' (1.0), so within the target's width group
    # the argmax is '456' for width 3, '7' for width 1 and '40' for width 2.
    targets = torch.tensor([case.encode("1234567.5x42")])
    logits = torch.zeros(1, targets.shape[1], case.V)
    for text, value in (("456", 3.0), ("7", 2.0), ("40", 1.0)):
        logits[..., case.id_of(text)] = value
    metrics = _summary(logits, targets, case.vocab)
    assert (metrics.digits, metrics.numbers) == (5, 2)
    assert metrics.digit_acc == pytest.approx(2 / 5)  # 456 and 7 right; 123, 5, 42 wrong
    assert metrics.number_acc == 0.0
    entropy = 2 * _entropy_of_one_peak(3.0, 1000) + 2 * _entropy_of_one_peak(2.0, 10) + _entropy_of_one_peak(1.0, 100)
    assert metrics.digit_entropy == pytest.approx(entropy / 5, rel=1e-5)
    # "456.7": both tokens are their group's argmax, so the number is right.
    assert _summary(logits[:, :3], torch.tensor([case.encode("456.7")]), case.vocab).number_acc == 1.0


def _predicting(tokens, vocab_size=13):
    """Logits [1, T, V] whose argmax at position t is tokens[t]."""
    logits = torch.zeros(1, len(tokens), vocab_size)
    logits[0, torch.arange(len(tokens)), torch.tensor(tokens)] = 3.0
    return logits


ANSWER_VOCAB = DigitVocab(tuple(range(10)), 10)  # ids 0..9 digits, 10 '.', 11 a word, 12 end of turn


@pytest.mark.parametrize(
    ("targets", "predicted", "right"),
    [
        ([11, 3, 9, 10, 12], [11, 3, 9, 10, 12], True),  # "x 39." all right
        ([11, 3, 9, 10, 12], [5, 3, 9, 11, 11], True),  # before the answer, and after its end: not scored
        ([11, 3, 9, 12, -100], [11, 3, 9, 11, 0], True),  # "39" ended by any non-number token
        ([11, 3, 9, 12, -100], [11, 3, 9, 0, 0], False),  # "390": the number does not end
        ([11, 3, 9, 10, 12], [11, 3, 9, 5, 12], False),  # "395"
        ([11, 3, 9, 10, 12], [11, 3, 9, 10, 12], True),  # the full stop is the ending, and right
        ([11, 2, 10, 5, 12], [11, 2, 11, 5, 12], False),  # "2.5": its point is inside, and wrong
        ([11, 3, 9, 10, 12], [11, 3, 8, 10, 12], False),  # a wrong digit
        ([1, 11, 3, 9, 12], [7, 11, 3, 9, 12], True),  # only the LAST number is the answer
        ([11, 11, 11, 12, -100], [11, 11, 11, 12, 12], False),  # no number at all
    ],
)
def test_answer_hits_by_hand(targets, predicted, right):
    targets = torch.tensor([targets])
    hits = answer_hits(_predicting(predicted), targets, number_spans(targets, ANSWER_VOCAB), ANSWER_VOCAB)
    assert hits.tolist() == [right]


def _answer_right_reference(logits, targets, vocab):
    """A loop over tokens, written from answer_hits' docstring."""
    numeric = set(vocab.digit_ids) | {vocab.point_id}
    predicted, labels = logits.argmax(-1).tolist(), targets.tolist()
    spans, current = [], None
    for t, label in enumerate(labels):
        if label in numeric:
            current = current if current is not None else []
            current.append(t)
        elif current is not None:
            spans.append(current)
            current = None
    if current is not None:
        spans.append(current)
    digits = [t for t in (spans[-1] if spans else []) if labels[t] in vocab.digit_ids]
    if not digits:
        return False
    last = digits[-1]
    if any(predicted[t] != labels[t] for t in spans[-1] if t <= last):
        return False
    end = last + 1
    if end == len(labels) or labels[end] == -100 or predicted[end] == labels[end]:
        return True
    return predicted[end] not in numeric  # the number ends


def test_answer_hits_match_a_loop_reference_on_random_batches():
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        # few token ids so that numbers, points and near-misses are frequent
        targets = torch.randint(0, 13, (16, 9), generator=generator)
        targets[targets == 12] = -100
        logits = torch.randn(16, 9, 13, generator=generator)
        right = targets.clamp_min(0)
        copy = torch.rand(16, 9, generator=generator) < 0.8  # mostly right, so that some answers are
        logits[copy] += 20 * torch.nn.functional.one_hot(right[copy], 13).float()
        hits = answer_hits(logits, targets, number_spans(targets, ANSWER_VOCAB), ANSWER_VOCAB)
        expected = [_answer_right_reference(logits[i], targets[i], ANSWER_VOCAB) for i in range(16)]
        assert hits.tolist() == expected
    assert 0 < sum(expected) < 16


def test_batch_scores_count_answers_and_their_hits():
    """Row 0's "39" is right, row 1's is not ("38"), row 2 is blank padding: 2 answers, 1 hit."""
    targets = torch.tensor([[11, 3, 9, 12], [11, 3, 9, 12], [-100, -100, -100, -100]])
    logits = torch.cat([_predicting([11, 3, 9, 12]), _predicting([11, 3, 8, 12]), _predicting([0, 0, 0, 0])])
    scores = score_batch(logits, targets, ANSWER_VOCAB)
    assert scores.hits.tolist() == [True, False, False]
    assert (float(scores.sums["answer_hits"]), float(scores.sums["answers"])) == (1.0, 2.0)
    metrics = summarise({k: float(v) for k, v in scores.sums.items()})
    assert (metrics.tf_answer_acc, metrics.answers) == (0.5, 2.0)
    assert scores.sums == teacher_forced_sums(logits, targets, ANSWER_VOCAB)
    plain = score_batch(logits, targets, None)  # no vocabulary: no number is scored
    assert plain.hits.tolist() == [False] * 3 and float(plain.sums["answers"]) == 2.0


def test_scores_of_examples_do_not_depend_on_the_batch_size():
    """score_examples over 5 examples of different lengths: the same sums and hits (in order) at
    1, 2 and 5 per batch; the logits depend on the token only, so right padding changes nothing."""
    table = torch.randn(13, 13, generator=torch.Generator().manual_seed(3))
    table[torch.arange(13), (torch.arange(13) + 1) % 12] += 4.0  # mostly predicts id + 1

    def logits_of(batch):
        return table[batch.input_ids]

    sequences = [[11, 2, 3, 12], [3, 4, 5], [11, 5, 6, 7, 12, 11], [8, 9], [11, 1, 2, 3, 4, 12]]
    examples = [Example(ids, ids[1:] + [-100]) for ids in sequences]
    reference = None
    for batch_size in (1, 2, 5):
        scores = score_examples(logits_of, examples, batch_size, 12, ANSWER_VOCAB, "cpu")
        result = ({k: float(v) for k, v in scores.sums.items()}, scores.hits.tolist())
        reference = reference or result
        assert result[1] == reference[1]
        assert result[0] == pytest.approx(reference[0], rel=1e-6)  # CE is summed in float32 per batch
    assert reference[0]["answers"] == 5 and 0 < sum(reference[1]) < 5


def test_digit_hits_mark_each_right_digit_target_and_nothing_else():
    vocab = DigitVocab(tuple(range(10)), 10)  # ids 0..9 are digits, 10 is '.'
    targets = torch.tensor([[1, 2, 11, 3, 10, 1, -100]])  # "12" and "3.1"; digit 1 favoured everywhere
    logits = torch.zeros(1, 7, 12)
    logits[..., 1] = 2.0
    spans = number_spans(targets, vocab)
    hits = digit_hits(logits[..., vocab.number_tensor()], spans, vocab)
    assert hits.tolist() == [[True, False, False, False, False, True, False]]
    assert float(teacher_forced_sums(logits, targets, vocab, spans)["digit_hits"]) == 2.0


def test_score_forced_answers_encodes_rows_like_training_and_restores_the_mode():
    """The study's entry point: rows encoded by the training encoder, answer hits per row, the mode
    given back; on a model that always predicts the reference, every answer is right."""
    from del_core.data.tokenized import encode
    from helpers.shared import real_tokenizer

    tokenizer = real_tokenizer("qwen2")
    rows = [{"instruction": "What is 2 plus 3?", "input": "", "output": "2 + 3 = 5\nThe answer is 5."}] * 2
    examples = [encode(row, tokenizer, 64, "alpaca") for row in rows]

    class Oracle(torch.nn.Module):
        """Logits [B, T, V] with the next reference token (of the first row) on top."""

        def forward(self, input_ids, attention_mask=None, use_cache=False):
            targets = torch.tensor(examples[0].targets).clamp_min(0)[: input_ids.shape[1]]
            logits = torch.zeros(*input_ids.shape, len(tokenizer))
            logits[:, torch.arange(input_ids.shape[1]), targets] = 5.0
            return type("Out", (), {"logits": logits})()

    model = Oracle().train()
    scored = score_forced_answers(model, tokenizer, rows, "alpaca", 64, batch_size=1)
    assert scored.hits == [True, True] and scored.metrics.tf_answer_acc == 1.0 and scored.metrics.digit_acc == 1.0
    assert model.training
