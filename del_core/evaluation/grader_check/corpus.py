"""A generated corpus of model-style outputs for differential grading, labelled by construction.

Every item is one output for one real benchmark record, written in one *form* (a phrasing, a LaTeX
or program rendering, a hedge, an elimination, a unit, a rounding). The form fixes the label:

  right      the output commits to the gold, written another way: must score correct
  wrong      the output commits to another value or option: must score wrong
  hedge      the output commits to two different values or options: must score wrong
  no_answer  the output never commits (echoes the options, gives up): must score wrong

``channel`` says how the project reads the item: "text" (a chain of thought,
``extract.answer_from_text``) or "program" (what a program printed,
``program_output.answer_from_program_output``).

A third of the forms (:data:`HELD_OUT_FORMS`) is held out: it was written together with the rest
before any scoring rule was changed, and its disagreements were not looked at while the rules were
changed; its agreement is reported on its own.

The corpus is deterministic: :func:`build_corpus` samples the records of each benchmark with a
fixed seed and each form derives its wrong values from the record alone.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from del_core.evaluation.grader_check.development_forms import DEVELOPMENT_FORMS
from del_core.evaluation.grader_check.held_out_forms import HELD_OUT_FORMS
from del_core.evaluation.grader_check.renderings import Form, wrong_value
from del_core.evaluation.question import Record

LABELS = ("right", "wrong", "hedge", "no_answer")


@dataclass(frozen=True)
class CorpusItem:
    benchmark: str
    index: int  # the record's index in its benchmark file
    form: str
    label: str  # one of LABELS
    channel: str  # "text" | "program"
    output: str
    held_out: bool

    @property
    def expected(self) -> bool:
        """The verdict the construction asks for."""
        return self.label == "right"


FORMS: dict[str, Form] = {**DEVELOPMENT_FORMS, **HELD_OUT_FORMS}


def sample_records(records: Sequence[Record], problems: int, seed: int = 0) -> list[Record]:
    """``problems`` records (all when fewer), a fixed-seed sample in file order."""
    if len(records) <= problems:
        return list(records)
    chosen = random.Random(seed).sample(range(len(records)), problems)
    return [records[i] for i in sorted(chosen)]


def build_corpus(records: Sequence[Record], problems: int = 300, seed: int = 0) -> list[CorpusItem]:
    """Every form for each of ``problems`` sampled records of one benchmark."""
    chosen = sample_records(records, problems, seed)
    items = []
    for record in chosen:
        wrong = wrong_value(record, chosen) if record.kind != "choice" else ""
        for name, form in FORMS.items():
            rendering = form(record, wrong, chosen)
            items.append(
                CorpusItem(
                    record.benchmark,
                    record.index,
                    name,
                    rendering.label,
                    rendering.channel,
                    rendering.output,
                    name in HELD_OUT_FORMS,
                )
            )
    return items
