"""The study's score-unit: a model (a run, or the starting model as the reference) scored on the
held-out split, teacher-forced and greedy (in this process), and on the benchmarks
(:func:`del_core.evaluation.benchmarks.runner.run` on a typed
:class:`~del_core.evaluation.benchmarks.config.EvalConfig`, in a spawned process).

Each evaluation's done marker is its summary.json, written last and atomically
(:func:`del_core.experiments.output_root.write_marker`): UNIT_DIR/heldout/ and UNIT_DIR/benchmarks/.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import yaml

from del_core.config import config_to_dict
from del_core.data.jsonl import write_jsonl
from del_core.data.prompting import PromptFormat
from del_core.evaluation.benchmarks.config import EvalConfig
from del_core.evaluation.benchmarks.files import BenchmarkError, data_dir_from
from del_core.experiments.output_root import read_marker, write_marker
from del_core.experiments.spawned import StepFailed, run_spawned
from del_core.experiments.study.config import StudyConfig, StudyError, shared_train_config
from del_core.experiments.study.train_unit import step_environment
from del_core.training.config import DataConfig


def evaluation_done(unit_dir: Path, with_benchmarks: bool) -> bool:
    """Both evaluations of a run (or of the reference) have written their summary.json."""
    markers = ["heldout", "benchmarks"] if with_benchmarks else ["heldout"]
    return all(read_marker(unit_dir / name / "summary.json") is not None for name in markers)


def training_data_options(config: StudyConfig) -> DataConfig:
    """The training runs' ``data`` section: the held-out rows are encoded and prompted as the runs
    were trained (``prompt_format``, ``max_length``)."""
    return shared_train_config(config).data


def evaluate_heldout(
    config: StudyConfig, model: str, forced_rows: Sequence[dict], greedy_rows: Sequence[dict], out_dir: Path
) -> None:
    """Score ``model`` on the held-out split, into OUT_DIR (summary.json written last: the done marker):

    teacher_forced.jsonl  per row of ``forced_rows``: whether its answer is right under teacher
                          forcing (:func:`del_core.evaluation.heldout.teacher_forced.score_forced_answers`)
    predictions.jsonl     greedy answers to ``greedy_rows`` (batched HF generate), scored
    summary.json          HeldOutSummary fields of the greedy answers, ``teacher_forced`` (answer_acc,
                          n and the teacher-forced means), ``seconds`` (load, score and generate)

    Both use the training runs' prompt format (``data.prompt_format``) and ``data.max_length``."""
    import torch

    from del_core.evaluation.generation import HFGenerator
    from del_core.evaluation.heldout.greedy_answers import score_heldout
    from del_core.evaluation.heldout.teacher_forced import score_forced_answers
    from del_core.models.sources import resolve_model

    started = time.time()
    torch.set_num_threads(config.threads)
    generator = HFGenerator(
        resolve_model(model), batch_size=config.eval_batch_size, max_new_tokens=config.heldout_max_new_tokens
    )
    data = training_data_options(config)
    prompt_format = data.prompt_format
    forced = score_forced_answers(
        generator.model,
        generator.tokenizer,
        forced_rows,
        prompt_format,
        data.max_length,
        config.eval_batch_size,
        generator.device,
    )
    forced_records = [
        {"index": i, "answer": row.get("answer"), "correct": hit}
        for i, (row, hit) in enumerate(zip(forced_rows, forced.hits))
    ]
    write_jsonl(out_dir / "teacher_forced.jsonl", forced_records)
    prompts = PromptFormat(prompt_format, generator.tokenizer)
    outputs = generator.generate([prompts.row_prompt(r) for r in greedy_rows], desc="held-out") if greedy_rows else []
    del generator
    scored, summary = score_heldout(greedy_rows, outputs)
    write_jsonl(out_dir / "predictions.jsonl", scored)
    metrics = dataclasses.asdict(forced.metrics)
    teacher_forced = {"answer_acc": forced.metrics.tf_answer_acc, "n": len(forced.hits), **metrics}
    write_marker(
        out_dir / "summary.json",
        {**summary.to_json(), "teacher_forced": teacher_forced, "seconds": round(time.time() - started, 1)},
        indent=2,
    )


def benchmark_config(config: StudyConfig, model: str, data_dir: Path, out_dir: Path) -> EvalConfig:
    """The evaluation (:class:`~del_core.evaluation.benchmarks.config.EvalConfig`) that asks the first
    ``benchmark_limit`` questions of each benchmark in the prompts the runs were trained on: their
    ``data.prompt_format`` and, under chat, the study's ``system_prompt``."""
    return EvalConfig(
        model=model,
        data_dir=str(data_dir),
        benchmarks=",".join(config.benchmarks),
        limit=config.benchmark_limit,
        backend=config.eval_backend,
        max_new_tokens=config.benchmark_max_new_tokens,
        batch_size=config.eval_batch_size,
        prompt_format=training_data_options(config).prompt_format,
        system_prompt=config.system_prompt,
        threads=config.threads,
        workers=max(1, config.threads),
        output_dir=str(out_dir),
    )


def evaluate(config: EvalConfig) -> int:
    """One benchmark evaluation in this process (the spawned one); its exit status."""
    from del_core.evaluation.benchmarks.runner import run

    return run(config)


def evaluate_benchmarks(config: StudyConfig, model: str, data_dir: Path, out_dir: Path) -> None:
    """The benchmarks of :func:`benchmark_config` into OUT_DIR (its summary.json is the done
    marker), recorded in OUT_DIR.yaml (the evaluation's keys, ``recipes/evaluate.py OUT_DIR.yaml``
    repeats it); the console output goes to OUT_DIR.log."""
    evaluation = benchmark_config(config, model, data_dir, out_dir)
    recipe = out_dir.parent / f"{out_dir.name}.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(yaml.safe_dump(config_to_dict(evaluation), sort_keys=False))
    log = out_dir.parent / f"{out_dir.name}.log"
    try:
        run_spawned(evaluate, evaluation, log, step_environment(config), f"the benchmarks of {model}")
    except StepFailed as err:
        raise StudyError(str(err)) from None


def benchmark_dir(config: StudyConfig) -> Optional[Path]:
    """The benchmark directory to use (``benchmark_dir``, else $DEL_BENCHMARK_DIR, else the
    repository's data/benchmarks: :func:`~del_core.evaluation.benchmarks.files.data_dir_from`), or
    None (with a printed reason) when benchmarks are skipped."""
    if not config.benchmarks or config.benchmark_limit == 0:
        return None
    try:
        return data_dir_from(config.benchmark_dir)
    except BenchmarkError as err:
        print(f"[study] {err}: skipping {', '.join(config.benchmarks)}", flush=True)
        return None


def drop_weights(run_dir: Path) -> None:
    """Delete RUN_DIR/final's weight files (keep_weights: false); config and tokenizer stay."""
    for path in (run_dir / "final").glob("*.safetensors"):
        path.unlink()
