"""A benchmark question as every part of evaluation sees it: :class:`Record`, the benchmarks' names
and the option letters.

``Record.kind`` says how an answer is compared:

  number   one number (GSM8K, SVAMP)
  numbers  a list of numbers in the gold's order (SimulEq; a single gold value is a list of one:
           the file gives the first unknown of questions that ask for two)
  math     a LaTeX answer compared by normalised text, numerically, or with sympy (MATH)
  choice   a letter A.. (AQuA, SAT, MMLU-math); ``choices`` holds the option texts

Records are read from the benchmark files by :mod:`del_core.evaluation.benchmarks.files`; the
answer readers (:mod:`del_core.evaluation.answers`) compare an answer with ``Record.gold``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

OPEN_ENDED = ("gsm8k", "math", "svamp", "simuleq")
MULTIPLE_CHOICE = ("aqua", "sat", "mmlu_mathematics")
BENCHMARKS = ("gsm8k", "math", "svamp", "simuleq", "aqua", "sat", "mmlu_mathematics")
LETTERS = "ABCDE"


@dataclass(frozen=True)
class Record:
    """One question of a benchmark file; ``index`` is its position in the file (the ``index`` of
    ``score_only`` rows)."""

    benchmark: str
    index: int
    question: str  # the text the prompt is built from (options included for multiple choice)
    gold: Union[str, list]  # a number or LaTeX text; a letter for choice; a list of number texts for "numbers"
    kind: str  # number | numbers | math | choice
    choices: tuple = field(default=())


def choices_text(choices) -> str:
    """The options as a question writes them: ``"(A) 12 (B) 15"``."""
    return " ".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(choices))
