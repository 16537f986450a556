"""Re-scoring saved outputs without a model (``recipes/evaluate.py --score-only``).

:func:`rescore` reads rows ``{"benchmark", "index", "output"[, "mode": auto | pot | cot]}`` (index =
the question's position in the benchmark file), scores them (:func:`score_outputs`), writes them
back with answer, correct, gold, unanswered and program_status, prints the table on stderr and the
summary as JSON on the last line of stdout. A predictions file with no rows is refused; the output
file is replaced atomically once its contents exist, so a failed run leaves an earlier output as it
was. Bad input raises :class:`PredictionsError` naming the file, the line and the field, before
anything is scored.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from del_core.data.jsonl import JsonlError, iter_jsonl, write_jsonl
from del_core.evaluation.answers.scoring import summarise
from del_core.evaluation.benchmarks.config import EvalConfig
from del_core.evaluation.benchmarks.files import data_dir_from, load_benchmark
from del_core.evaluation.benchmarks.sandbox_consent import check_sandbox
from del_core.evaluation.benchmarks.scored_rows import Reading, read_program_outputs, scored_row, text_answer
from del_core.evaluation.benchmarks.summary_table import format_table
from del_core.evaluation.question import BENCHMARKS, Record
from del_core.evaluation.sandbox.harness import SandboxLimits

MODES = ("auto", "pot", "cot")  # how a saved output is read: see score_outputs


class PredictionsError(ValueError):
    """A ``score_only`` file, line or field that cannot be re-scored."""


@dataclass(frozen=True)
class Prediction:
    """One checked row of a score_only input."""

    row: dict  # as read: benchmark, index, output, optional mode, any other keys (kept in the output)
    where: str  # "PATH line N", for error messages

    @property
    def mode(self) -> str:
        return self.row.get("mode", "auto")


def _check_prediction(row: dict, where: str) -> Prediction:
    for key, kind in (("benchmark", str), ("index", int), ("output", str)):
        if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
            raise PredictionsError(f"{where}: field {key!r} missing or not {kind.__name__}")
    if row["benchmark"] not in BENCHMARKS:
        raise PredictionsError(
            f"{where}: field 'benchmark' is {row['benchmark']!r}, not one of {', '.join(BENCHMARKS)}"
        )
    if row.get("mode", "auto") not in MODES:
        raise PredictionsError(f"{where}: field 'mode' is {row['mode']!r}, not auto, pot or cot")
    return Prediction(row, where)


def read_predictions(path: Path) -> list[Prediction]:
    """The rows of a score_only input; :class:`PredictionsError` names the first bad line and field."""
    if not path.is_file():
        raise PredictionsError(f"score_only file not found: {path}")
    try:
        predictions = [_check_prediction(row, f"{path} line {number}") for number, row in iter_jsonl(path)]
    except JsonlError as err:
        raise PredictionsError(str(err)) from None
    if not predictions:
        raise PredictionsError(f"score_only file {path} holds no rows (nothing to score)")
    return predictions


def _question(prediction: Prediction, questions: list[Record]) -> Record:
    index = prediction.row["index"]
    if not 0 <= index < len(questions):
        raise PredictionsError(
            f"{prediction.where}: field 'index' is {index}, but {prediction.row['benchmark']} has "
            f"{len(questions)} questions (0..{len(questions) - 1})"
        )
    return questions[index]


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
        zip(runs, read_program_outputs([items[i][0] for i in runs], [items[i][1] for i in runs], limits, workers))
    )
    rows = []
    for i, (record, output, mode) in enumerate(items):
        reading = ran.get(i, Reading(None))
        if reading.answer is None and (mode != "pot" or record.kind == "choice"):
            reading = Reading(text_answer(record, output), reading.program, reading.sandbox)
        rows.append(scored_row(record, "score_only", None, output, reading))
    return rows


def rescore(config: EvalConfig, limits: SandboxLimits) -> int:
    """Re-score ``config.score_only`` into ``config.output`` (module docstring); the exit status."""
    predictions = read_predictions(Path(config.score_only))
    data_dir = data_dir_from(config.data_dir)
    names = sorted({p.row["benchmark"] for p in predictions})
    records = {name: load_benchmark(name, data_dir) for name in names}
    check_sandbox(config.sandbox, {p.row["benchmark"] for p in predictions if p.mode != "cot"})
    items = [(_question(p, records[p.row["benchmark"]]), p.row["output"], p.mode) for p in predictions]
    scored = score_outputs(items, limits, config.workers)
    out_rows = []
    for p, row in zip(predictions, scored):
        extra = {k: row[k] for k in ("answer", "correct", "gold", "unanswered")}
        extra["program_status"] = row["sandbox"]["status"] if row["sandbox"] else None
        out_rows.append({**p.row, **extra})
    write_jsonl(Path(config.output), out_rows)
    summary = summarise(scored)
    print(format_table(summary), file=sys.stderr)
    print(json.dumps(summary))
    return 0
