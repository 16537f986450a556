"""The zero-shot prompts of the paper's protocol, in the training template (:mod:`del_core.data.prompting`).

Open-ended sets (GSM8K, SVAMP, SimulEq, MATH) are asked first for a program (program of thought:
the question followed by " Let's write a program."), then, when the program yields no answer, in
plain chain of thought (the question alone). Multiple-choice sets (AQuA, SAT, MMLU-math) are asked
in chain of thought with their options ("Answer Choices: (A) .. (B) .."), already part of
``Record.question``.
"""

from __future__ import annotations

from del_core.data.prompting import format_prompt
from del_core.evaluation.benchmarks import Record

PROGRAM_SUFFIX = " Let's write a program."


def program_prompt(record: Record) -> str:
    return format_prompt(record.question + PROGRAM_SUFFIX)


def chain_of_thought_prompt(record: Record) -> str:
    return format_prompt(record.question)
