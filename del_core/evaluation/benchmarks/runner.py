"""What ``recipes/evaluate.py`` does: evaluate a model on the benchmarks, or re-score saved outputs.

Evaluating (:func:`evaluate_model`) writes OUTPUT_DIR/predictions.jsonl (one row per question:
prompt, output, program, answer, gold, correct; :mod:`.scored_rows`) and OUTPUT_DIR/summary.json
(accuracy per benchmark, mACC, MAE, log-MAE, per-place digit accuracy, and the run's ``config``),
and prints the table. Re-scoring a ``score_only`` file is :func:`.rescoring.rescore`. Every
output file is replaced atomically once its contents exist, so a failed run leaves an earlier
output as it was.

Bad input (benchmark files, prediction rows, the model, the back end) raises
:class:`EvaluationError` from :func:`run`, always before a model is loaded.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from del_core.data.jsonl import JsonlError, write_json, write_jsonl
from del_core.data.prompting import PromptFormat
from del_core.data.rows import DataError
from del_core.evaluation.answers.scoring import summarise
from del_core.evaluation.benchmarks.config import EvalConfig
from del_core.evaluation.benchmarks.files import BenchmarkError, data_dir_from, load_benchmark, parse_benchmark_list
from del_core.evaluation.benchmarks.rescoring import PredictionsError, rescore
from del_core.evaluation.benchmarks.sandbox_consent import check_sandbox
from del_core.evaluation.benchmarks.summary_table import format_table
from del_core.evaluation.benchmarks.zero_shot import GenerationLengths, evaluate
from del_core.evaluation.generation import GeneratorError, check_backend
from del_core.evaluation.sandbox.harness import SandboxLimits, SandboxUnavailable
from del_core.models.sources import ModelSourceError, resolve_model


class EvaluationError(ValueError):
    """Input the evaluator cannot use; the message is one line naming the file, row or option."""


def default_output_dir(model: str, resolved: str) -> Path:
    """OUTPUT_DIR/eval for a training output (``resolved`` is its final/), else eval/<model name>."""
    path = Path(resolved)
    if path.name == "final" and path.is_dir():
        return path.parent / "eval"
    return Path("eval") / re.sub(r"[^\w.-]+", "_", Path(model).name or model)


def _limits(config: EvalConfig) -> SandboxLimits:
    return SandboxLimits(
        wall_seconds=config.program_seconds, cpu_seconds=config.program_cpu_seconds, mode=config.sandbox
    )


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
    check_sandbox(config.sandbox, names)
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
    summary = summarise(rows)
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
        return rescore(config, _limits(config)) if config.score_only else evaluate_model(config)
    except (
        BenchmarkError,
        DataError,
        ModelSourceError,
        GeneratorError,
        JsonlError,
        PredictionsError,
        SandboxUnavailable,
    ) as err:
        raise EvaluationError(str(err)) from None
