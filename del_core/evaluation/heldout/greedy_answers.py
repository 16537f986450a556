"""Greedy answers to held-out problems, scored by the project's one answer reader.

The gold of a row is ``row["answer"]`` when present, else the number its reference ``output``
(a conversation: its last assistant turn) states, read by the same extractor as the model's
outputs (:func:`~del_core.evaluation.answers.extract.answer_from_text`: the
number after "The answer is", else the last number written). Training (``data.eval_generate``)
and the study both score held-out answers here; benchmarks use
:mod:`del_core.evaluation.answers.scoring` with the same number comparison
(:func:`~del_core.evaluation.answers.numbers.numbers_match`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Optional

from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.numbers import numbers_match
from del_core.evaluation.answers.scoring import summarise


@dataclass
class HeldOutSummary:
    """Over n held-out problems: the share answered exactly, the share with any number, and over
    the answered ones the mean absolute and log errors and the per-place digit accuracy."""

    n: int
    exact_acc: Optional[float]
    answered: Optional[float]
    mae: Optional[float]
    log_mae: Optional[float]
    digit_acc: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def reference_answer(row: dict) -> Optional[str]:
    """The gold answer of a held-out row (see the module docstring); None when it states none."""
    if row.get("answer") is not None:
        return str(row["answer"])
    if "messages" in row:  # a conversation: its last assistant turn is the reference
        return answer_from_text(
            next(m["content"] for m in reversed(row["messages"]) if m["role"] == "assistant"), "number"
        )
    return answer_from_text(row["output"], "number")


def score_heldout(rows: Sequence[dict], outputs: Sequence[str]) -> tuple[list[dict], HeldOutSummary]:
    """(scored rows, summary) of greedy ``outputs`` to held-out ``rows``, one output per row."""
    if len(rows) != len(outputs):
        raise ValueError(f"{len(rows)} rows but {len(outputs)} outputs")
    scored = []
    for index, (row, output) in enumerate(zip(rows, outputs)):
        answer, gold = answer_from_text(output, "number"), reference_answer(row)
        correct = answer is not None and gold is not None and numbers_match(answer, gold)
        scored.append(
            {
                "benchmark": "heldout",
                "index": index,
                "kind": "number",
                "instruction": row["instruction"],
                "output": output,
                "answer": answer,
                "gold": gold,
                "correct": correct,
                "unanswered": answer is None,
            }
        )
    if not scored:
        return [], HeldOutSummary(0, None, None, None, None)
    summary = summarise(scored)
    heldout, numeric = summary["benchmarks"]["heldout"], summary["numeric"]
    return scored, HeldOutSummary(
        n=heldout["n"],
        exact_acc=heldout["accuracy"],
        answered=1 - heldout["unanswered"] / heldout["n"],
        mae=numeric["mae"],
        log_mae=numeric["log_mae"],
        digit_acc=numeric.get("digit_acc", {}),
    )


def answer_accuracy(rows: Sequence[dict], outputs: Sequence[str]) -> float:
    """The share of ``outputs`` whose answer equals the row's gold (0.0 for no rows)."""
    _, summary = score_heldout(rows, outputs)
    return summary.exact_acc or 0.0
