"""One unit of the study's work: a training run (``recipes/train.py`` in a subprocess), the
held-out scores of a model (teacher-forced and greedy answers), and the benchmarks
(``recipes/evaluate.py`` in a subprocess).

Every step has a done marker, written last, so an interrupted study redoes only what is missing:
the "final" record of RUN_DIR/metrics.jsonl (training), and the summary.json of
UNIT_DIR/heldout/ and UNIT_DIR/benchmarks/ (evaluations).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from del_core.data.jsonl import write_jsonl
from del_core.data.prompting import PromptFormat
from del_core.study.config import StudyConfig, StudyError, train_overrides
from del_core.training.config import DataConfig
from del_core.training.records import read_metrics

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "recipes" / "train.py"
EVALUATE = REPO / "recipes" / "evaluate.py"


def training_done(run_dir: Path) -> bool:
    """train.py finished: RUN_DIR/metrics.jsonl holds its final record."""
    return bool(read_metrics(run_dir, "final"))


def evaluation_done(unit_dir: Path, with_benchmarks: bool) -> bool:
    """Both evaluations of a run (or of the reference) have written their summary.json."""
    return (unit_dir / "heldout" / "summary.json").is_file() and (
        not with_benchmarks or (unit_dir / "benchmarks" / "summary.json").is_file()
    )


def subprocess_env(config: StudyConfig) -> dict[str, str]:
    """The environment of train.py and evaluate.py: ``threads`` OpenMP threads, passive waiting,
    DeepSpeed on the CPU accelerator when there is no GPU."""
    import torch

    env = {**os.environ, "OMP_NUM_THREADS": str(config.threads), "TOKENIZERS_PARALLELISM": "false"}
    # Busy-waiting OpenMP threads are many times slower when another job shares the cores.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if not torch.cuda.is_available():
        env.setdefault("DS_ACCELERATOR", "cpu")
    return env


def run_logged(command: Sequence[str], log_path: Path, env: dict[str, str], what: str) -> None:
    """Run ``command`` (cwd: the repository) with stdout and stderr into ``log_path``; StudyError
    with the last 4000 characters of the log when it fails."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.run(list(command), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-4000:]
        raise StudyError(f"{what} failed (exit {proc.returncode}); log {log_path}:\n{tail}")


def train_run(config: StudyConfig, loss: str, seed: int, run_dir: Path) -> None:
    """train.py for one (loss, seed) into ``run_dir``, logged to RUN_DIR.train.log beside it. A
    leftover unfinished run there is removed first (its metrics.jsonl would be appended to)."""
    if run_dir.exists():
        print(f"[study]   removing the unfinished run in {run_dir}", flush=True)
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    command = [sys.executable, str(TRAIN), *train_overrides(config, loss, seed, run_dir)]
    run_logged(
        command, run_dir.parent / f"{run_dir.name}.train.log", subprocess_env(config), f"training {loss} seed {seed}"
    )
    if not training_done(run_dir):
        raise StudyError(f"training {loss} seed {seed} exited 0 but wrote no final record in {run_dir}/metrics.jsonl")


def data_option(config: StudyConfig, name: str) -> Any:
    """The training runs' ``data.<name>`` (the study's train section, else DataConfig's default):
    the held-out rows are encoded and prompted as the runs were trained."""
    return config.train.get("data", {}).get(name, getattr(DataConfig(), name))


def evaluate_heldout(
    config: StudyConfig, model: str, forced_rows: Sequence[dict], greedy_rows: Sequence[dict], out_dir: Path
) -> None:
    """Score ``model`` on the held-out split, into OUT_DIR (summary.json written last: the done marker):

    teacher_forced.jsonl  per row of ``forced_rows``: whether its answer is right under teacher
                          forcing (:mod:`del_core.evaluation.forced_answers`)
    predictions.jsonl     greedy answers to ``greedy_rows`` (batched HF generate), scored
    summary.json          HeldoutSummary fields of the greedy answers, ``teacher_forced`` (answer_acc,
                          n and the teacher-forced means), ``seconds`` (load, score and generate)

    Both use the training runs' prompt format (``data.prompt_format``) and ``data.max_length``."""
    import torch

    from del_core.evaluation.generation import HFGenerator
    from del_core.evaluation.greedy_answers import score_heldout
    from del_core.evaluation.teacher_forced import score_forced_answers
    from del_core.models.sources import resolve_model

    started = time.time()
    torch.set_num_threads(config.threads)
    generator = HFGenerator(
        resolve_model(model), batch_size=config.eval_batch_size, max_new_tokens=config.heldout_max_new_tokens
    )
    prompt_format = data_option(config, "prompt_format")
    forced = score_forced_answers(
        generator.model,
        generator.tokenizer,
        forced_rows,
        prompt_format,
        data_option(config, "max_length"),
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
    _write_marker(
        out_dir / "summary.json",
        {**summary.to_json(), "teacher_forced": teacher_forced, "seconds": round(time.time() - started, 1)},
    )


def _write_marker(path: Path, data: dict) -> None:
    """Write the JSON ``data`` to ``path`` atomically: a done marker is either whole or absent."""
    staging = path.with_name(f".{path.name}.partial")
    staging.write_text(json.dumps(data, indent=2) + "\n")
    staging.replace(path)


def benchmark_recipe(config: StudyConfig, model: str, data_dir: Path, out_dir: Path) -> dict[str, Any]:
    """The keys of ``recipes/evaluate.py`` (:class:`del_core.evaluation.config.EvalConfig`) that ask
    the first ``benchmark_limit`` questions of each benchmark in the prompts the runs were trained
    on: their ``data.prompt_format`` and, under chat, the study's ``system_prompt``."""
    return {
        "model": model,
        "data_dir": str(data_dir),
        "benchmarks": ",".join(config.benchmarks),
        "limit": config.benchmark_limit,
        "backend": config.eval_backend,
        "max_new_tokens": config.benchmark_max_new_tokens,
        "batch_size": config.eval_batch_size,
        "prompt_format": data_option(config, "prompt_format"),
        "system_prompt": config.system_prompt,
        "threads": config.threads,
        "workers": max(1, config.threads),
        "output_dir": str(out_dir),
    }


def evaluate_benchmarks(config: StudyConfig, model: str, data_dir: Path, out_dir: Path) -> None:
    """``recipes/evaluate.py`` on :func:`benchmark_recipe`, written to OUT_DIR.yaml (a YAML file
    keeps an empty system prompt, which a command-line value cannot), into OUT_DIR (its summary.json
    is the done marker); its console output goes to OUT_DIR.log."""
    import yaml

    recipe = out_dir.parent / f"{out_dir.name}.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(yaml.safe_dump(benchmark_recipe(config, model, data_dir, out_dir), sort_keys=False))
    command = [sys.executable, str(EVALUATE), str(recipe)]
    run_logged(command, out_dir.parent / f"{out_dir.name}.log", subprocess_env(config), f"evaluate.py on {model}")


def benchmark_dir(config: StudyConfig) -> Optional[Path]:
    """The benchmark directory to use, or None (with a printed reason) when benchmarks are skipped."""
    if not config.benchmarks or config.benchmark_limit == 0:
        return None
    value = config.benchmark_dir or os.environ.get("DEL_BENCHMARK_DIR")
    skipping = f"skipping {', '.join(config.benchmarks)}"
    if not value:
        print(
            f"[study] no benchmark directory (pass --benchmark-dir DIR or set DEL_BENCHMARK_DIR): {skipping}",
            flush=True,
        )
        return None
    path = Path(value)
    if not path.is_dir():
        print(f"[study] benchmark directory {path} not found: {skipping}", flush=True)
        return None
    return path


def drop_weights(run_dir: Path) -> None:
    """Delete RUN_DIR/final's weight files (keep_weights: false); config and tokenizer stay."""
    for path in (run_dir / "final").glob("*.safetensors"):
        path.unlink()
