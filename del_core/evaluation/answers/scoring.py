"""Whether an answer is right, and the summary metrics of a set of scored rows.

Comparison by kind: number -> ``numbers.numbers_match`` (tolerance rule documented there);
numbers -> the prediction's first len(gold) numbers each match the gold's, in the gold's order
(a shorter prediction is wrong; numbers after them are ignored); math ->
``math_equivalence.math_equivalent``; choice -> the same letter (no answer is wrong, and counted
as unanswered).

Summary (:func:`summarise`): per benchmark n, correct, accuracy, unanswered; mACC = the unweighted
mean of the accuracies of the benchmarks present; and, over rows where the prediction and the gold
both parse as one number (first elements for lists), MAE, log-MAE and per-place digit accuracy of
the integer and fractional parts (places of the gold as written; keys "10^k").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Optional

from del_core.evaluation.answers.math_equivalence import math_equivalent, normalise
from del_core.evaluation.answers.numbers import log_abs_error, numbers_match, parse_number, place_hits
from del_core.evaluation.question import BENCHMARKS, Record


def is_correct(answer, record: Record) -> bool:
    """Whether ``answer`` (as extracted; None = no answer) answers ``record``."""
    if answer is None:
        return False
    if record.kind == "choice":
        return answer == record.gold
    if record.kind == "number":
        return numbers_match(answer, record.gold)
    if record.kind == "numbers":
        predicted = answer if isinstance(answer, list) else [answer]
        gold = record.gold if isinstance(record.gold, list) else [record.gold]
        return len(predicted) >= len(gold) and all(numbers_match(p, g) for p, g in zip(predicted, gold))
    if record.kind == "math":
        return math_equivalent(answer, record.gold)
    raise ValueError(f"unknown answer kind {record.kind!r} ({record.benchmark} row {record.index})")


def _scalar_text(value) -> Optional[str]:
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else str(value)


def _numeric_pair(answer, gold, kind: str):
    """(prediction, gold, gold as written) as exact numbers, or None when either does not parse."""
    if kind == "choice":
        return None
    a, g = _scalar_text(answer), _scalar_text(gold)
    if a is None or g is None:
        return None
    if kind == "math":
        a, g = normalise(a), normalise(g)
    p, q = parse_number(a), parse_number(g)
    return None if p is None or q is None else (p, q, g)


class _NumericTotals:
    def __init__(self):
        self.n, self.abs_error, self.log_error = 0, 0.0, 0.0
        self.place = defaultdict(lambda: [0, 0])

    def add(self, prediction, gold, gold_text):
        self.n += 1
        self.abs_error += float(abs(prediction - gold))
        self.log_error += log_abs_error(prediction, gold)
        for place, hit in place_hits(prediction, gold, gold_text).items():
            self.place[place][0] += hit
            self.place[place][1] += 1

    def as_dict(self) -> dict:
        if not self.n:
            return {"n": 0, "mae": None, "log_mae": None, "digit_acc": {}}
        order = sorted(self.place, key=lambda key: -int(key[3:]))  # 10^2, 10^1, 10^0, 10^-1, ...
        return {
            "n": self.n,
            "mae": self.abs_error / self.n,
            "log_mae": self.log_error / self.n,
            "digit_acc": {key: self.place[key][0] / self.place[key][1] for key in order},
            "digit_n": {key: self.place[key][1] for key in order},
        }


def summarise(rows: Iterable[dict]) -> dict:
    """The summary of scored rows (each with benchmark, kind, answer, gold, correct)."""
    per = defaultdict(lambda: {"n": 0, "correct": 0, "unanswered": 0})
    numeric = defaultdict(_NumericTotals)
    for row in rows:
        stats = per[row["benchmark"]]
        stats["n"] += 1
        stats["correct"] += bool(row["correct"])
        stats["unanswered"] += row["answer"] is None
        pair = _numeric_pair(row["answer"], row["gold"], row["kind"])
        if pair is not None:
            numeric[row["benchmark"]].add(*pair)
            numeric["all"].add(*pair)
    ordered = [b for b in BENCHMARKS if b in per] + sorted(set(per) - set(BENCHMARKS))
    benchmarks = {}
    for name in ordered:
        stats = per[name]
        benchmarks[name] = {**stats, "accuracy": stats["correct"] / stats["n"], "numeric": numeric[name].as_dict()}
    accuracies = [b["accuracy"] for b in benchmarks.values()]
    return {
        "benchmarks": benchmarks,
        "mACC": sum(accuracies) / len(accuracies) if accuracies else None,
        "numeric": numeric["all"].as_dict(),
    }
