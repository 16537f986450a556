"""Re-scoring saved outputs (del_core.evaluation.benchmarks.rescoring.score_outputs): how a saved
reply is read under each mode. The command line (--score-only) is tested in tests/recipes/test_evaluate.py."""

from __future__ import annotations

import pytest

from del_core.evaluation.benchmarks.rescoring import score_outputs
from del_core.evaluation.question import Record
from del_core.evaluation.sandbox.harness import SandboxLimits

LIMITS = SandboxLimits(wall_seconds=5, cpu_seconds=3)
RECORDS = [
    Record("gsm8k", 0, "Q-program: what is 9 * 2?", "18", "number"),
    Record("gsm8k", 1, "Q-words: what is 5 + 5?", "10", "number"),
]


@pytest.mark.launches
def test_score_only_reads_a_program_reply_without_a_program_as_text():
    items = [(RECORDS[1], "Ten. The answer is 10.", "pot"), (RECORDS[0], "```python\nprint(18)\n```", "auto")]
    rows = score_outputs(items, LIMITS, workers=1)
    assert [(row["answer"], row["correct"], row["program"]) for row in rows] == [
        ("10", True, None),
        ("18", True, "print(18)"),
    ]


def test_the_question_orders_a_named_simuleq_answer():
    record = Record("simuleq", 0, "How many novelists are there? How many poets are there?", ["15", "9"], "numbers")
    (row,) = score_outputs([(record, "5 : 3 of 24.\nThere are 9 poets and 15 novelists.", "cot")], LIMITS, workers=1)
    assert (row["answer"], row["correct"]) == (["15", "9"], True)
