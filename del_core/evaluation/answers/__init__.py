"""Answers: reading the answer a model wrote and grading it against a question's gold.

Reading, for every kind of :class:`~del_core.evaluation.question.Record`:
  extract.py          the answer of a chain-of-thought text (:func:`answer_from_text`; None: no answer)
  program_output.py   the program in an output (:func:`program_from_output`) and the answer it printed
                      (:func:`answer_from_program_output`)
  segments.py         where a text writes its answer (the last ``\\boxed{..}``, "The answer is", "####")
  hedges.py           when an output commits to no single answer (two values, a give-up)
  unknowns.py         SimulEq's named values in the order the question asks for them
  numbers.py          the one number reader and the number rule (:func:`numbers_match`)
Grading:
  math_equivalence.py equivalence of two MATH answers in LaTeX (:func:`math_equivalent`)
  scoring.py          whether an answer is right (:func:`is_correct`) and the summary metrics of scored
                      rows (accuracy, mACC, MAE, log-MAE, per-place digit accuracy)

Nothing here runs a model or a program: the readers are pure functions of the text and the record.
"""

from .extract import Answer, answer_from_text
from .math_equivalence import math_equivalent
from .numbers import find_numbers, numbers_match, parse_number
from .program_output import answer_from_program_output, program_from_output
from .scoring import is_correct, summarise

__all__ = [
    "Answer",
    "answer_from_program_output",
    "answer_from_text",
    "find_numbers",
    "is_correct",
    "math_equivalent",
    "numbers_match",
    "parse_number",
    "program_from_output",
    "summarise",
]
