"""The zero-shot prompts of the paper's protocol, in the training template (:mod:`del_core.data.prompting`).

Every prompt is built by the training's own builder, :meth:`PromptFormat.question` (Alpaca by
default; the tokenizer's chat template with the generation prompt under ``prompt_format=chat``).

Open-ended sets (GSM8K, SVAMP, SimulEq, MATH) are asked first for a program (program of thought:
the question followed by " Let's write a program."), then, when the program yields no answer, in
plain chain of thought (the question alone). Multiple-choice sets (AQuA, SAT, MMLU-math) are asked
in chain of thought with their options ("Answer Choices: (A) .. (B) .."), already part of
``Record.question``, and the response starts with the release's prefix :data:`CHOICE_RESPONSE_PREFIX`
(the way MathInstruct's multiple-choice answers start), which the model continues.
"""

from __future__ import annotations

from del_core.data.prompting import ALPACA_FORMAT, PromptFormat
from del_core.evaluation.question import Record

PROGRAM_SUFFIX = " Let's write a program."
CHOICE_RESPONSE_PREFIX = "Let's solve the multi-choice question step by step.\n"


def program_prompt(record: Record, prompts: PromptFormat = ALPACA_FORMAT) -> str:
    return prompts.question(record.question + PROGRAM_SUFFIX)


def chain_of_thought_prompt(record: Record, prompts: PromptFormat = ALPACA_FORMAT) -> str:
    return prompts.question(record.question)


def choice_prompt(record: Record, prompts: PromptFormat = ALPACA_FORMAT) -> str:
    """A multiple-choice question's prompt, ending in the response prefix the model continues."""
    return prompts.question(record.question) + CHOICE_RESPONSE_PREFIX
