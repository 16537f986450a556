"""Every question of the seven benchmark files: its gold answer, written the ways a model writes it,
scores 100%; a hand-made wrong answer scores 0%."""

import contextlib
import io

import pytest

from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.numbers import parse_number
from del_core.evaluation.answers.program_output import answer_from_program_output, program_from_output
from del_core.evaluation.answers.scoring import is_correct, summarise
from del_core.evaluation.benchmarks.files import load_benchmark
from del_core.evaluation.benchmarks.rescoring import score_outputs
from del_core.evaluation.question import BENCHMARKS, LETTERS, OPEN_ENDED
from del_core.evaluation.sandbox.harness import SandboxLimits

ROWS = {"gsm8k": 1319, "math": 5000, "svamp": 1000, "simuleq": 514, "aqua": 254, "sat": 220, "mmlu_mathematics": 974}


def gold_text(record) -> str:
    return ", ".join(record.gold) if isinstance(record.gold, list) else record.gold


def written_answers(record):
    """The gold as a model writes it: plain, "The answer is X.", \\boxed{X}."""
    gold = gold_text(record)
    return {
        "plain": gold,
        "answer is": f"Let me think step by step. The answer is {gold}.",
        "boxed": f"So the final answer is $\\boxed{{{gold}}}$.",
    }


def gold_program(record) -> str:
    if record.kind in ("number", "numbers"):
        values = record.gold if isinstance(record.gold, list) else [record.gold]
        return "print(" + ", ".join(values) + ")"
    return f"answer = {gold_text(record)!r}\nprint(answer)"


def printed(code: str) -> str:
    """What the program prints (run here: these programs are ours and trivial)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(code, {})
    return buffer.getvalue()


def wrong_answer(record) -> str:
    if record.kind == "choice":
        return LETTERS[(LETTERS.index(record.gold) + 1) % len(record.choices)]
    gold = record.gold[0] if isinstance(record.gold, list) else record.gold
    value = parse_number(gold)
    if value is None:  # in front: math-verify reads "90\\text{ units}+1" as 90, what follows a unit is dropped
        return "1+" + gold
    return str(value + 1) if value.denominator == 1 else str(float(value + 1))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_gold_answers_score_every_question(name, data_dir):
    records = load_benchmark(name, data_dir)
    assert len(records) == ROWS[name] and [r.index for r in records] == list(range(ROWS[name]))
    failures = []
    for record in records:
        for form, output in written_answers(record).items():
            answer = answer_from_text(output, record.kind, record.choices)
            if not is_correct(answer, record):
                failures.append((record.index, form, record.gold, answer))
        program = program_from_output(gold_program(record))
        answer = answer_from_program_output(printed(program), record.kind, record.choices)
        if not is_correct(answer, record):
            failures.append((record.index, "program", record.gold, answer))
    assert failures == []


@pytest.mark.parametrize("name", BENCHMARKS)
def test_wrong_answers_score_zero(name, data_dir):
    records = load_benchmark(name, data_dir)
    rows = []
    for record in records:
        wrong = wrong_answer(record)
        output = f"The answer is \\boxed{{{wrong}}}." if record.kind == "math" else f"The answer is {wrong}."
        answer = answer_from_text(output, record.kind, record.choices)
        rows.append(
            {
                "benchmark": name,
                "kind": record.kind,
                "answer": answer,
                "gold": record.gold,
                "correct": is_correct(answer, record),
            }
        )
    summary = summarise(rows)["benchmarks"][name]
    assert (summary["n"], summary["correct"], summary["unanswered"]) == (ROWS[name], 0, 0)


@pytest.mark.launches
def test_gold_programs_through_the_sandbox(data_dir):
    """The open-ended sets (the ones the protocol asks for programs), 3 questions each, for real."""
    records = [r for name in OPEN_ENDED for r in load_benchmark(name, data_dir, limit=3)]
    rows = score_outputs([(r, gold_program(r), "pot") for r in records], SandboxLimits(wall_seconds=10), workers=2)
    assert [row["sandbox"]["status"] for row in rows] == ["ok"] * 12
    assert [row["correct"] for row in rows] == [True] * 12
