"""The evaluation protocol: records + a generator -> scored rows; and re-scoring saved outputs.

:func:`evaluate` (zero-shot, greedy): open-ended records get the program-of-thought prompt; the
program found in the output runs in the sandbox and its printed answer is extracted; an output
with no program at all is read as a chain-of-thought text (models often answer in words). Records
left without an answer (no program and no answer in the text, a failed program, nothing parseable
printed) are asked again in chain of thought and answered from the text. Multiple-choice records
get one chain-of-thought prompt ending in the release's response prefix. Generation lengths are
the release's (:class:`GenerationLengths`: 1500 new tokens open-ended, 2048 multiple choice).
:func:`score_outputs` scores saved outputs without a model (``--score-only``).

A row: benchmark, index, kind, mode (pot | cot | cot_retry | score_only), prompt, output, program
(the code run, or null), sandbox (status and stdout tail, or null), answer (null: no answer), gold,
correct, unanswered; a cot_retry row also keeps its first attempt under ``program_attempt``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Optional

from del_core.data.prompting import ALPACA_FORMAT, PromptFormat
from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.program_output import answer_from_program_output, program_from_output
from del_core.evaluation.answers.scoring import is_correct
from del_core.evaluation.benchmarks.prompts import chain_of_thought_prompt, choice_prompt, program_prompt
from del_core.evaluation.question import Record
from del_core.evaluation.sandbox.harness import SandboxLimits, run_programs

STDOUT_KEPT = 2000  # characters of a program's stdout kept in a row (its tail)


@dataclass(frozen=True)
class GenerationLengths:
    """New tokens generated per answer at most, per kind of question (the release's defaults)."""

    open_ended: int = 1500
    choice: int = 2048


def _row(record: Record, mode: str, prompt: Optional[str], output: str, answer, program=None, sandbox=None) -> dict:
    return {
        "benchmark": record.benchmark,
        "index": record.index,
        "kind": record.kind,
        "mode": mode,
        "prompt": prompt,
        "output": output,
        "program": program,
        "sandbox": sandbox,
        "answer": answer,
        "gold": record.gold,
        "correct": is_correct(answer, record),
        "unanswered": answer is None,
    }


def _text_answer(record: Record, output: str):
    """The answer a chain-of-thought output gives to ``record`` (its question orders named values)."""
    return answer_from_text(output, record.kind, record.choices, record.question)


def run_program_outputs(
    records: Sequence[Record], outputs: Sequence[str], limits: SandboxLimits, workers: int
) -> list[tuple]:
    """For each output: (answer or None, program or None, sandbox summary or None). An output with
    no program is read as text (a chain-of-thought reply to a program prompt)."""
    from tqdm import tqdm

    programs = [program_from_output(output) for output in outputs]
    to_run = [i for i, program in enumerate(programs) if program is not None]
    with tqdm(
        total=len(to_run), desc="run programs", unit="prog", file=sys.stderr, dynamic_ncols=True, disable=None
    ) as bar:
        results = run_programs([programs[i] for i in to_run], limits, workers, progress=lambda: bar.update(1))
    by_output = dict(zip(to_run, results))
    answered = []
    for i, (record, program) in enumerate(zip(records, programs)):
        result = by_output.get(i)
        if result is None:
            answered.append((_text_answer(record, outputs[i]), None, None))
            continue
        answer = answer_from_program_output(result.stdout, record.kind, record.choices) if result.ok else None
        sandbox = {"status": result.status, "stdout": result.stdout[-STDOUT_KEPT:]}
        answered.append((answer, program, sandbox))
    return answered


def _chain_of_thought_rows(records, prompts, generator, max_new_tokens: int, desc: str, rows: dict) -> None:
    """Generate and read chain-of-thought answers; a record that already has a row keeps it as the
    ``program_attempt`` of its ``cot_retry`` row."""
    outputs = generator.generate(prompts, desc=desc, max_new_tokens=max_new_tokens)
    for record, prompt, output in zip(records, prompts, outputs):
        key = (record.benchmark, record.index)
        answer = _text_answer(record, output)
        row = _row(record, "cot_retry" if key in rows else "cot", prompt, output, answer)
        if key in rows:
            first = rows[key]
            row["program_attempt"] = {k: first[k] for k in ("prompt", "output", "program", "sandbox")}
        rows[key] = row


def evaluate(
    records: Sequence[Record],
    generator,
    limits: SandboxLimits = SandboxLimits(),
    workers: int = 4,
    lengths: GenerationLengths = GenerationLengths(),
    prompts: PromptFormat = ALPACA_FORMAT,
) -> list[dict]:
    """Scored rows for ``records`` (in their order), by the protocol of the module docstring.
    ``generator.generate(prompts, desc=, max_new_tokens=)`` returns one output per prompt;
    ``prompts`` is the prompt format the model was trained with."""
    rows: dict[tuple, dict] = {}
    open_ended = [r for r in records if r.kind != "choice"]
    retry: list[Record] = []
    if open_ended:
        texts = [program_prompt(r, prompts) for r in open_ended]
        outputs = generator.generate(texts, desc="program of thought", max_new_tokens=lengths.open_ended)
        for record, prompt, output, (answer, program, sandbox) in zip(
            open_ended, texts, outputs, run_program_outputs(open_ended, outputs, limits, workers)
        ):
            rows[(record.benchmark, record.index)] = _row(record, "pot", prompt, output, answer, program, sandbox)
            if answer is None:
                retry.append(record)
    if retry:
        texts = [chain_of_thought_prompt(r, prompts) for r in retry]
        _chain_of_thought_rows(retry, texts, generator, lengths.open_ended, "chain of thought", rows)
    choice = [r for r in records if r.kind == "choice"]
    if choice:
        texts = [choice_prompt(r, prompts) for r in choice]
        _chain_of_thought_rows(choice, texts, generator, lengths.choice, "multiple choice", rows)
    return [rows[(r.benchmark, r.index)] for r in records]


def _looks_like_program(output: str) -> bool:
    return "```" in output or "print(" in output


def score_outputs(
    items: Iterable[tuple[Record, str, str]], limits: SandboxLimits = SandboxLimits(), workers: int = 4
) -> list[dict]:
    """Rows for saved outputs: (record, output, mode) with mode auto | pot | cot. For open-ended
    records, ``pot`` (or ``auto`` when the output has a code fence or a print call) runs the
    program and, under ``auto``, falls back to reading the text when that gives no answer;
    multiple-choice outputs are always read as text."""
    items = list(items)
    runs = [
        i
        for i, (record, output, mode) in enumerate(items)
        if record.kind != "choice" and (mode == "pot" or (mode == "auto" and _looks_like_program(output)))
    ]
    ran = dict(
        zip(runs, run_program_outputs([items[i][0] for i in runs], [items[i][1] for i in runs], limits, workers))
    )
    rows = []
    for i, (record, output, mode) in enumerate(items):
        answer, program, sandbox = ran.get(i, (None, None, None))
        if answer is None and (mode != "pot" or record.kind == "choice"):
            answer = _text_answer(record, output)
        rows.append(_row(record, "score_only", None, output, answer, program, sandbox))
    return rows
