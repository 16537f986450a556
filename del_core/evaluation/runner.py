"""What ``recipes/evaluate.py`` does: evaluate a model on the benchmarks, or re-score saved outputs.

Evaluating (:func:`evaluate_model`) writes OUTPUT_DIR/predictions.jsonl (one row per question:
prompt, output, program, answer, gold, correct; :mod:`.protocol`) and OUTPUT_DIR/summary.json
(accuracy per benchmark, mACC, MAE, log-MAE, per-place digit accuracy, and the run's ``config``),
and prints the table. Re-scoring (:func:`score_only`) reads rows ``{"benchmark", "index",
"output"[, "mode": auto | pot | cot]}`` (index = the question's position in the benchmark file),
writes them back with answer, correct, gold, unanswered and program_status, prints the table on
stderr and the summary as JSON on the last line of stdout. A predictions file with no rows is
refused; every output file is replaced atomically once its contents exist, so a failed run leaves
an earlier output as it was.

Bad input (benchmark files, prediction rows, the model, the back end) raises
:class:`EvaluationError` from :func:`run`, always before a model is loaded.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from del_core.data.jsonl import JsonlError, iter_jsonl, write_json, write_jsonl
from del_core.data.prompting import PromptFormat
from del_core.data.rows import DataError
from del_core.evaluation.benchmarks import (
    BENCHMARKS,
    OPEN_ENDED,
    BenchmarkError,
    Record,
    data_dir_from,
    load_benchmark,
    parse_benchmark_list,
)
from del_core.evaluation.config import EvalConfig
from del_core.evaluation.generation import GeneratorError, check_backend
from del_core.evaluation.protocol import GenerationLengths, evaluate, score_outputs
from del_core.evaluation.report import format_table
from del_core.evaluation.sandbox import SandboxLimits, SandboxUnavailable, resolve_mode
from del_core.evaluation.scoring import summarize
from del_core.models.sources import ModelSourceError, resolve_model

MODES = ("auto", "pot", "cot")  # how a saved output is read: see protocol.score_outputs


class EvaluationError(ValueError):
    """Input the evaluator cannot use; the message is one line naming the file, row or option."""


@dataclass(frozen=True)
class Prediction:
    """One checked row of a score_only input."""

    row: dict  # as read: benchmark, index, output, optional mode, any other keys (kept in the output)
    where: str  # "PATH line N", for error messages

    @property
    def mode(self) -> str:
        return self.row.get("mode", "auto")


def default_output_dir(model: str, resolved: str) -> Path:
    """OUTPUT_DIR/eval for a training output (``resolved`` is its final/), else eval/<model name>."""
    path = Path(resolved)
    if path.name == "final" and path.is_dir():
        return path.parent / "eval"
    return Path("eval") / re.sub(r"[^\w.-]+", "_", Path(model).name or model)


def _check_prediction(row: dict, where: str) -> Prediction:
    for key, kind in (("benchmark", str), ("index", int), ("output", str)):
        if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
            raise EvaluationError(f"{where}: field {key!r} missing or not {kind.__name__}")
    if row["benchmark"] not in BENCHMARKS:
        raise EvaluationError(f"{where}: field 'benchmark' is {row['benchmark']!r}, not one of {', '.join(BENCHMARKS)}")
    if row.get("mode", "auto") not in MODES:
        raise EvaluationError(f"{where}: field 'mode' is {row['mode']!r}, not auto, pot or cot")
    return Prediction(row, where)


def read_predictions(path: Path) -> list[Prediction]:
    """The rows of a score_only input; :class:`EvaluationError` names the first bad line and field."""
    if not path.is_file():
        raise EvaluationError(f"--score-only file not found: {path}")
    try:
        predictions = [_check_prediction(row, f"{path} line {number}") for number, row in iter_jsonl(path)]
    except JsonlError as err:
        raise EvaluationError(str(err)) from None
    if not predictions:
        raise EvaluationError(f"--score-only file {path} holds no rows (nothing to score)")
    return predictions


def _question(prediction: Prediction, questions: list[Record]) -> Record:
    index = prediction.row["index"]
    if not 0 <= index < len(questions):
        raise EvaluationError(
            f"{prediction.where}: field 'index' is {index}, but {prediction.row['benchmark']} has "
            f"{len(questions)} questions (0..{len(questions) - 1})"
        )
    return questions[index]


def _limits(config: EvalConfig) -> SandboxLimits:
    return SandboxLimits(
        wall_seconds=config.program_seconds, cpu_seconds=config.program_cpu_seconds, mode=config.sandbox
    )


def _check_sandbox(config: EvalConfig, benchmarks: Iterable[str]) -> None:
    """Probe the sandbox before any model loads when the run may execute generated programs (one of
    ``benchmarks`` is open-ended): :class:`SandboxUnavailable` where it refuses (``resolve_mode``).
    Multiple-choice benchmarks run no program and need no sandbox."""
    if any(name in OPEN_ENDED for name in benchmarks):
        resolve_mode(config.sandbox)


def score_only(config: EvalConfig) -> int:
    """Re-score ``config.score_only`` into ``config.output`` (module docstring); the exit status."""
    predictions = read_predictions(Path(config.score_only))
    data_dir = data_dir_from(config.data_dir)
    names = sorted({p.row["benchmark"] for p in predictions})
    records = {name: load_benchmark(name, data_dir) for name in names}
    _check_sandbox(config, {p.row["benchmark"] for p in predictions if p.mode != "cot"})
    items = [(_question(p, records[p.row["benchmark"]]), p.row["output"], p.mode) for p in predictions]
    scored = score_outputs(items, _limits(config), config.workers)
    out_rows = []
    for p, row in zip(predictions, scored):
        extra = {k: row[k] for k in ("answer", "correct", "gold", "unanswered")}
        extra["program_status"] = row["sandbox"]["status"] if row["sandbox"] else None
        out_rows.append({**p.row, **extra})
    write_jsonl(Path(config.output), out_rows)
    summary = summarize(scored)
    print(format_table(summary), file=sys.stderr)
    print(json.dumps(summary))
    return 0


def generation_lengths(config: EvalConfig) -> GenerationLengths:
    """The per-kind generation lengths of ``config`` (``max_new_tokens``, when set, for both)."""
    if config.max_new_tokens is not None:
        return GenerationLengths(config.max_new_tokens, config.max_new_tokens)
    return GenerationLengths(config.open_max_new_tokens, config.choice_max_new_tokens)


def _run_config(
    config: EvalConfig, resolved: str, backend: str, names: tuple, data_dir: Path, lengths: GenerationLengths, started
) -> dict:
    """The ``config`` entry of summary.json: what was run, and its wall time."""
    return {
        "model": config.model,
        "resolved_model": resolved,
        "backend": backend,
        "tp": config.tp,
        "benchmarks": list(names),
        "limit": config.limit,
        "max_new_tokens": {"open_ended": lengths.open_ended, "choice": lengths.choice},
        "batch_size": config.batch_size,
        "prompt_format": config.prompt_format,
        "system_prompt": config.system_prompt,
        "data_dir": str(data_dir),
        "seconds": round(time.time() - started, 1),
    }


def evaluate_model(config: EvalConfig) -> int:
    """Evaluate ``config.model`` on the benchmarks (module docstring); the exit status. Benchmarks,
    back end and model source are checked before the model is loaded."""
    from del_core.evaluation.generation import make_generator

    data_dir = data_dir_from(config.data_dir)
    names = parse_benchmark_list(config.benchmarks)
    records = [r for name in names for r in load_benchmark(name, data_dir, config.limit)]
    check_backend(config.backend)
    _check_sandbox(config, names)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    resolved = resolve_model(config.model)
    output_dir = Path(config.output_dir) if config.output_dir else default_output_dir(config.model, resolved)
    started = time.time()
    lengths = generation_lengths(config)
    generator = make_generator(
        resolved,
        config.backend,
        tp=config.tp,
        batch_size=config.batch_size,
        max_new_tokens=lengths.open_ended,
        dtype=config.dtype,
    )
    prompts = PromptFormat(config.prompt_format, generator.tokenizer, config.system_prompt)
    print(f"[evaluate] {resolved} ({generator.name}), {len(records)} questions of {', '.join(names)}", file=sys.stderr)
    rows = evaluate(records, generator, _limits(config), config.workers, lengths, prompts)
    summary = summarize(rows)
    summary["config"] = _run_config(config, resolved, generator.name, names, data_dir, lengths, started)
    write_jsonl(output_dir / "predictions.jsonl", rows)
    write_json(output_dir / "summary.json", summary, indent=2, ensure_ascii=False)
    print(format_table(summary))
    print(f"[evaluate] wrote {output_dir / 'predictions.jsonl'} and {output_dir / 'summary.json'}")
    return 0


def run(config: EvalConfig) -> int:
    """Re-score (``config.score_only`` set) or evaluate; the exit status. Bad input raises
    :class:`EvaluationError`."""
    try:
        return score_only(config) if config.score_only else evaluate_model(config)
    except (BenchmarkError, DataError, ModelSourceError, GeneratorError, JsonlError, SandboxUnavailable) as err:
        raise EvaluationError(str(err)) from None
