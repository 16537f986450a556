"""From a model's output to a scored row: the one reading of an output, shared by the zero-shot
protocol (:mod:`.zero_shot`) and re-scoring (:mod:`.rescoring`).

An output read as a program reply (:func:`read_program_outputs`): the program found in it runs in
the sandbox and its printed answer is read (:mod:`del_core.evaluation.answers.program_output`); an
output with no program at all is read as a chain-of-thought text (models often answer in words).
An output read as text (:func:`text_answer`): :func:`~del_core.evaluation.answers.extract.answer_from_text`
with the question, which orders a SimulEq answer's named values.

A row (:func:`scored_row`): benchmark, index, kind, mode (pot | cot | cot_retry | score_only),
prompt, output, program (the code run, or null), sandbox (status and stdout tail, or null), answer
(null: no answer), gold, correct, unanswered; a cot_retry row also keeps its first attempt under
``program_attempt``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from del_core.evaluation.answers.extract import Answer, answer_from_text
from del_core.evaluation.answers.program_output import answer_from_program_output, program_from_output
from del_core.evaluation.answers.scoring import is_correct
from del_core.evaluation.question import Record
from del_core.evaluation.sandbox.harness import SandboxLimits, run_programs

STDOUT_KEPT = 2000  # characters of a program's stdout kept in a row (its tail)


@dataclass(frozen=True)
class Reading:
    """What an output answers, and how it was found: the program run (None: read as text) and the
    sandbox's status and stdout tail (None when no program ran)."""

    answer: Answer
    program: Optional[str] = None
    sandbox: Optional[dict] = None


def scored_row(record: Record, mode: str, prompt: Optional[str], output: str, reading: Reading) -> dict:
    """The row of one output (module docstring), its answer compared with ``record``'s gold."""
    return {
        "benchmark": record.benchmark,
        "index": record.index,
        "kind": record.kind,
        "mode": mode,
        "prompt": prompt,
        "output": output,
        "program": reading.program,
        "sandbox": reading.sandbox,
        "answer": reading.answer,
        "gold": record.gold,
        "correct": is_correct(reading.answer, record),
        "unanswered": reading.answer is None,
    }


def text_answer(record: Record, output: str) -> Answer:
    """The answer a chain-of-thought output gives to ``record`` (its question orders named values)."""
    return answer_from_text(output, record.kind, record.choices, record.question)


def read_program_outputs(
    records: Sequence[Record], outputs: Sequence[str], limits: SandboxLimits, workers: int
) -> list[Reading]:
    """Each output read as a program reply (module docstring), the programs run ``workers`` at a
    time; an output with no program is read as text. With no program to run, no sandbox starts."""
    from tqdm import tqdm

    programs = [program_from_output(output) for output in outputs]
    to_run = [i for i, program in enumerate(programs) if program is not None]
    if not to_run:
        return [Reading(text_answer(record, output)) for record, output in zip(records, outputs)]
    with tqdm(
        total=len(to_run), desc="run programs", unit="prog", file=sys.stderr, dynamic_ncols=True, disable=None
    ) as bar:
        results = run_programs([programs[i] for i in to_run], limits, workers, progress=lambda: bar.update(1))
    by_output = dict(zip(to_run, results))
    readings = []
    for i, (record, program) in enumerate(zip(records, programs)):
        result = by_output.get(i)
        if result is None:
            readings.append(Reading(text_answer(record, outputs[i])))
            continue
        answer = answer_from_program_output(result.stdout, record.kind, record.choices) if result.ok else None
        readings.append(Reading(answer, program, {"status": result.status, "stdout": result.stdout[-STDOUT_KEPT:]}))
    return readings
