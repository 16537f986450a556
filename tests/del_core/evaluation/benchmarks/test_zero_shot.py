"""The zero-shot protocol (del_core.evaluation.benchmarks.zero_shot.evaluate) with a scripted generator:
which prompt each kind of question gets, at which generation length, and how a reply becomes an answer."""

from __future__ import annotations

import pytest

from del_core.evaluation.benchmarks.prompts import CHOICE_RESPONSE_PREFIX, PROGRAM_SUFFIX
from del_core.evaluation.benchmarks.zero_shot import GenerationLengths, evaluate
from del_core.evaluation.question import Record
from del_core.evaluation.sandbox.harness import SandboxLimits

LIMITS = SandboxLimits(wall_seconds=5, cpu_seconds=3)
RECORDS = [
    Record("gsm8k", 0, "Q-program: what is 9 * 2?", "18", "number"),
    Record("gsm8k", 1, "Q-words: what is 5 + 5?", "10", "number"),
    Record("gsm8k", 2, "Q-retry: what is 3 + 4?", "7", "number"),
    Record("aqua", 0, "Q-choice: pick 12\nAnswer Choices: (A) 10 (B) 12", "B", "choice", ("10", "12")),
]


class ScriptedGenerator:
    """Replies by the question's tag; records every call's prompts, description and length."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, desc="generate", max_new_tokens=None):
        self.calls.append((desc, max_new_tokens, list(prompts)))
        return [self._reply(prompt) for prompt in prompts]

    @staticmethod
    def _reply(prompt: str) -> str:
        if "Q-program" in prompt:
            return "```python\nprint(9 * 2)\n```"
        if "Q-words" in prompt:
            return "5 + 5 makes ten, so the answer is 10."  # no program: read as text
        if "Q-retry" in prompt and PROGRAM_SUFFIX in prompt:
            return "```python\nraise ValueError('no')\n```"  # a failing program: asked again
        if "Q-retry" in prompt:
            return "3 + 4 = 7. The answer is 7."
        return "12 is option (B).\nThe answer is (B)."


@pytest.mark.launches
def test_each_kind_gets_its_prompt_length_and_reading():
    generator = ScriptedGenerator()
    rows = evaluate(RECORDS, generator, LIMITS, workers=2, lengths=GenerationLengths(open_ended=150, choice=200))
    assert [(row["mode"], row["answer"], row["correct"]) for row in rows] == [
        ("pot", "18", True),
        ("pot", "10", True),
        ("cot_retry", "7", True),
        ("cot", "B", True),
    ]
    assert [(desc, length, len(prompts)) for desc, length, prompts in generator.calls] == [
        ("program of thought", 150, 3),
        ("chain of thought", 150, 1),
        ("multiple choice", 200, 1),
    ]
    program_prompts, retry_prompts, choice_prompts = (prompts for _, _, prompts in generator.calls)
    assert all(prompt.endswith(f"{PROGRAM_SUFFIX}\n\n### Response:\n") for prompt in program_prompts)
    assert retry_prompts[0].endswith("Q-retry: what is 3 + 4?\n\n### Response:\n")
    assert choice_prompts[0].endswith("### Response:\n" + CHOICE_RESPONSE_PREFIX)
    assert rows[0]["program"] == "print(9 * 2)" and rows[0]["sandbox"]["status"] == "ok"
    assert rows[1]["program"] is None and rows[1]["sandbox"] is None
    assert rows[2]["program_attempt"]["sandbox"]["status"] == "error"


def test_release_lengths_are_the_defaults():
    assert GenerationLengths() == GenerationLengths(open_ended=1500, choice=2048)
