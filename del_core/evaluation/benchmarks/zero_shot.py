"""The zero-shot protocol of the DEL paper: records + a generator -> scored rows.

:func:`evaluate` (greedy): open-ended records get the program-of-thought prompt; the program found
in the output runs in the sandbox and its printed answer is extracted; an output with no program at
all is read as a chain-of-thought text (models often answer in words). Records left without an
answer (no program and no answer in the text, a failed program, nothing parseable printed) are
asked again in chain of thought and answered from the text. Multiple-choice records get one
chain-of-thought prompt ending in the release's response prefix. Generation lengths are the
release's (:class:`GenerationLengths`: 1500 new tokens open-ended, 2048 multiple choice). Outputs
are read and rows built by :mod:`.scored_rows`; saved outputs are re-scored by :mod:`.rescoring`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from del_core.data.prompting import ALPACA_FORMAT, PromptFormat
from del_core.evaluation.benchmarks.prompts import chain_of_thought_prompt, choice_prompt, program_prompt
from del_core.evaluation.benchmarks.scored_rows import Reading, read_program_outputs, scored_row, text_answer
from del_core.evaluation.question import Record
from del_core.evaluation.sandbox.harness import SandboxLimits


@dataclass(frozen=True)
class GenerationLengths:
    """New tokens generated per answer at most, per kind of question (the release's defaults)."""

    open_ended: int = 1500
    choice: int = 2048


def _chain_of_thought_rows(records, prompts, generator, max_new_tokens: int, desc: str, rows: dict) -> None:
    """Generate and read chain-of-thought answers; a record that already has a row keeps it as the
    ``program_attempt`` of its ``cot_retry`` row."""
    outputs = generator.generate(prompts, desc=desc, max_new_tokens=max_new_tokens)
    for record, prompt, output in zip(records, prompts, outputs):
        key = (record.benchmark, record.index)
        reading = Reading(text_answer(record, output))
        row = scored_row(record, "cot_retry" if key in rows else "cot", prompt, output, reading)
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
        for record, prompt, output, reading in zip(
            open_ended, texts, outputs, read_program_outputs(open_ended, outputs, limits, workers)
        ):
            rows[(record.benchmark, record.index)] = scored_row(record, "pot", prompt, output, reading)
            if reading.answer is None:
                retry.append(record)
    if retry:
        texts = [chain_of_thought_prompt(r, prompts) for r in retry]
        _chain_of_thought_rows(retry, texts, generator, lengths.open_ended, "chain of thought", rows)
    choice = [r for r in records if r.kind == "choice"]
    if choice:
        texts = [choice_prompt(r, prompts) for r in choice]
        _chain_of_thought_rows(choice, texts, generator, lengths.choice, "multiple choice", rows)
    return [rows[(r.benchmark, r.index)] for r in records]
