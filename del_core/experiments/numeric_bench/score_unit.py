"""Scoring a trained benchmark model on one split: greedy answers and teacher-forced statistics.

Teacher-forced statistics are the project's one definition (:mod:`del_core.evaluation.heldout.teacher_forced`).

Greedy answers come from the project's one generation path
(:func:`del_core.evaluation.generation.generate_greedy`) and are read by its one number reader
(:mod:`del_core.evaluation.answers.numbers`). An answer that holds no number counts as the prediction 0
for MAE and log-MAE (so a loss cannot improve its MAE by answering nothing) and as wrong at every
place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch

from del_core import DigitVocab
from del_core.data.synthetic import Problem, answer_text
from del_core.data.tokenized import TokenBatch
from del_core.evaluation.answers.numbers import find_numbers, log_abs_error, parse_number, place_hits
from del_core.evaluation.generation import generate_greedy
from del_core.evaluation.heldout.teacher_forced import score_examples, summarise
from del_core.experiments.numeric_bench.char_tokenizer import encode_examples


@dataclass
class EvalResult:
    """One split's scores. ``correct`` is per problem (1/0, in the split's order: the paired
    statistics use it); ``place_acc`` maps "10^k" to the share of problems whose answer has that
    place right (over the problems whose gold has it); ``tf_*`` are teacher-forced over the gold
    answers: CE per token (nats), digit entropy (nats) and digit accuracy at digit positions."""

    n: int
    exact_acc: float
    mae: float
    log_mae: float
    parse_rate: float
    tf_ce: float
    tf_digit_entropy: float
    tf_digit_acc: float
    place_acc: dict[str, float] = field(default_factory=dict)
    correct: list[int] = field(default_factory=list)


def read_prediction(text: str) -> Fraction | None:
    """The first number of a greedy answer (the answer is the whole completion), None if none."""
    numbers = find_numbers(text)
    return parse_number(numbers[0]) if numbers else None


def score_answers(problems: Sequence[Problem], outputs: Sequence[str]) -> dict[str, Any]:
    """Exact match, MAE, log-MAE, parse rate, per-place accuracy and the per-problem hits."""
    correct, abs_errors, log_errors, parsed = [], [], [], 0
    place_hits_by_key: dict[str, list[bool]] = defaultdict(list)
    for problem, output in zip(problems, outputs):
        gold_text = answer_text(problem.answer)
        gold = parse_number(gold_text)
        prediction = read_prediction(output)
        parsed += prediction is not None
        value = prediction if prediction is not None else Fraction(0)
        correct.append(int(prediction is not None and prediction == gold))
        abs_errors.append(float(abs(value - gold)))
        log_errors.append(log_abs_error(value, gold))
        for place, hit in place_hits(value, gold, gold_text).items():
            place_hits_by_key[place].append(hit and prediction is not None)
    n = max(len(problems), 1)
    return {
        "n": len(problems),
        "exact_acc": sum(correct) / n,
        "mae": sum(abs_errors) / n,
        "log_mae": sum(log_errors) / n,
        "parse_rate": parsed / n,
        "place_acc": {k: sum(v) / len(v) for k, v in sorted(place_hits_by_key.items(), key=_place_order)},
        "correct": correct,
    }


def _place_order(item: tuple[str, list[bool]]) -> int:
    return -int(item[0].split("^")[1])  # 10^2, 10^1, 10^0, 10^-1, ...


@torch.no_grad()
def teacher_forced(
    model, tokenizer, vocab: DigitVocab, problems: Sequence[Problem], batch_size: int, device: str = "cpu"
) -> dict[str, float]:
    """CE per answer token, digit entropy and digit accuracy over the gold answers, by the project's
    one definition (:mod:`del_core.evaluation.heldout.teacher_forced`)."""

    def logits_of(batch: TokenBatch) -> torch.Tensor:
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits

    was_training = model.training
    model.eval()
    try:
        examples = encode_examples(problems, tokenizer)
        scores = score_examples(logits_of, examples, batch_size, tokenizer.pad_token_id, vocab, device)
    finally:
        model.train(was_training)
    metrics = summarise({name: float(value) for name, value in scores.sums.items()})
    return {"tf_ce": metrics.ce, "tf_digit_entropy": metrics.digit_entropy, "tf_digit_acc": metrics.digit_acc}


def evaluate(
    model, tokenizer, vocab: DigitVocab, problems: Sequence[Problem], batch_size: int, device: str = "cpu"
) -> EvalResult:
    """Greedy answers (at most the longest gold answer + 2 tokens) and teacher-forced statistics."""
    max_new = max(len(answer_text(p.answer)) for p in problems) + 2
    prompts = [p.question for p in problems]
    outputs = generate_greedy(model, tokenizer, prompts, max_new, device, batch_size=batch_size, desc="answers")
    forced = teacher_forced(model, tokenizer, vocab, problems, batch_size, device)
    return EvalResult(**score_answers(problems, outputs), **forced)
