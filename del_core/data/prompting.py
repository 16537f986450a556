"""The one fixed prompt template of training and evaluation (Alpaca style).

The authors' release draws one of 12 templates at random per run, unseeded; this project always
uses this one, so training and evaluation prompts are identical.
"""

from __future__ import annotations

ALPACA_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
ALPACA = (
    "Below is an instruction that describes a task. Write a response that appropriately completes "
    "the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)


def format_prompt(instruction: str, input: str = "") -> str:
    """The prompt for one MathInstruct-style row; the response follows it directly."""
    if input.strip():
        return ALPACA_WITH_INPUT.format(instruction=instruction, input=input)
    return ALPACA.format(instruction=instruction)
