"""What ``recipes/evaluate.py`` does: evaluate a model on the benchmarks, or re-score saved outputs.

Evaluating writes OUTPUT_DIR/predictions.jsonl (one row per question: prompt, output, program,
answer, gold, correct) and OUTPUT_DIR/summary.json (accuracy per benchmark, mACC, MAE, log-MAE,
per-place digit accuracy), and prints the table. Re-scoring (``score_only``) reads rows
``{"benchmark", "index", "output"[, "mode": auto | pot | cot]}`` (index = the question's position
in the benchmark file), writes them back with answer, correct, gold and unanswered, prints the
table on stderr and the summary as JSON on the last line of stdout.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from del_core.data.jsonl import JsonlError, iter_jsonl, write_jsonl
from del_core.evaluation.benchmarks import (
    BENCHMARKS,
    BenchmarkError,
    data_dir_from,
    load_benchmark,
    parse_benchmark_list,
)
from del_core.evaluation.config import EvalConfig
from del_core.evaluation.report import format_table, write_json
from del_core.evaluation.sandbox import SandboxLimits
from del_core.evaluation.scoring import summarize


def default_output_dir(model: str, resolved: str) -> Path:
    path = Path(resolved)
    if path.name == "final" and path.is_dir():
        return path.parent / "eval"
    return Path("eval") / re.sub(r"[^\w.-]+", "_", Path(model).name or model)


def _check_prediction(row: dict, where: str) -> dict:
    for key, kind in (("benchmark", str), ("index", int), ("output", str)):
        if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
            raise BenchmarkError(f"{where}: field {key!r} missing or not {kind.__name__}")
    if row["benchmark"] not in BENCHMARKS:
        raise BenchmarkError(f"{where}: field 'benchmark' is {row['benchmark']!r}, not one of {', '.join(BENCHMARKS)}")
    if row.get("mode", "auto") not in ("auto", "pot", "cot"):
        raise BenchmarkError(f"{where}: field 'mode' is {row['mode']!r}, not auto, pot or cot")
    return {**row, "_where": where}


def read_predictions(path: Path) -> list[dict]:
    """Rows of a score_only input; a bad row stops with its line and field."""
    if not path.is_file():
        raise BenchmarkError(f"--score-only file not found: {path}")
    try:
        return [_check_prediction(row, f"{path} line {number}") for number, row in iter_jsonl(path)]
    except JsonlError as err:
        raise BenchmarkError(str(err)) from None


def _limits(config: EvalConfig) -> SandboxLimits:
    return SandboxLimits(wall_seconds=config.program_seconds, cpu_seconds=config.program_cpu_seconds)


def score_only(config: EvalConfig) -> int:
    from del_core.evaluation.protocol import score_outputs

    data_dir = data_dir_from(config.data_dir)
    predictions = read_predictions(Path(config.score_only))
    records = {name: load_benchmark(name, data_dir) for name in sorted({p["benchmark"] for p in predictions})}
    items = []
    for p in predictions:
        questions = records[p["benchmark"]]
        if not 0 <= p["index"] < len(questions):
            raise BenchmarkError(
                f"{p['_where']}: field 'index' is {p['index']}, but {p['benchmark']} has "
                f"{len(questions)} questions (0..{len(questions) - 1})"
            )
        items.append((questions[p["index"]], p["output"], p.get("mode", "auto")))
    scored = score_outputs(items, _limits(config), config.workers)
    out_rows = []
    for p, row in zip(predictions, scored):
        extra = {k: row[k] for k in ("answer", "correct", "gold", "unanswered")}
        extra["program_status"] = row["sandbox"]["status"] if row["sandbox"] else None
        out_rows.append({**{k: v for k, v in p.items() if k != "_where"}, **extra})
    write_jsonl(Path(config.output), out_rows)
    summary = summarize(scored)
    print(format_table(summary), file=sys.stderr)
    print(json.dumps(summary))
    return 0


def evaluate_model(config: EvalConfig) -> int:
    from del_core.evaluation.generation import make_generator, resolve_model
    from del_core.evaluation.protocol import evaluate

    data_dir = data_dir_from(config.data_dir)
    names = parse_benchmark_list(config.benchmarks)
    records = [r for name in names for r in load_benchmark(name, data_dir, config.limit)]
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    resolved = resolve_model(config.model)
    output_dir = Path(config.output_dir) if config.output_dir else default_output_dir(config.model, resolved)
    started = time.time()
    generator = make_generator(
        resolved,
        config.backend,
        tp=config.tp,
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        dtype=config.dtype,
    )
    print(f"[evaluate] {resolved} ({generator.name}), {len(records)} questions of {', '.join(names)}", file=sys.stderr)
    rows = evaluate(records, generator, _limits(config), config.workers)
    summary = summarize(rows)
    summary["config"] = {
        "model": config.model,
        "resolved_model": resolved,
        "backend": generator.name,
        "tp": config.tp,
        "benchmarks": list(names),
        "limit": config.limit,
        "max_new_tokens": config.max_new_tokens,
        "batch_size": config.batch_size,
        "data_dir": str(data_dir),
        "seconds": round(time.time() - started, 1),
    }
    write_jsonl(output_dir / "predictions.jsonl", rows)
    write_json(output_dir / "summary.json", summary)
    print(format_table(summary))
    print(f"[evaluate] wrote {output_dir / 'predictions.jsonl'} and {output_dir / 'summary.json'}")
    return 0


def run(config: EvalConfig) -> int:
    return score_only(config) if config.score_only else evaluate_model(config)
