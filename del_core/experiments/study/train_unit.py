"""The study's train-unit: one (loss, seed) run, :func:`del_core.training.run` on its typed
:class:`~del_core.training.config.TrainConfig` (:func:`~del_core.experiments.study.config.train_config`)
in a spawned process (:mod:`del_core.experiments.spawned`), logged to RUN_DIR.train.log beside it.

Its done marker is the "final" record of RUN_DIR/metrics.jsonl, written by the trainer last.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from del_core.experiments.spawned import StepFailed, run_spawned
from del_core.experiments.study.config import StudyConfig, StudyError, train_config
from del_core.training.config import TrainConfig, check_sources
from del_core.training.records import read_metrics


def training_done(run_dir: Path) -> bool:
    """The run finished: RUN_DIR/metrics.jsonl holds its final record."""
    return bool(read_metrics(run_dir, "final"))


def step_environment(config: StudyConfig) -> dict[str, str]:
    """What a spawned step adds to the environment: ``threads`` OpenMP threads, passive waiting,
    DeepSpeed on the CPU accelerator when there is no GPU (each unless already set)."""
    import torch

    env = {"OMP_NUM_THREADS": str(config.threads), "TOKENIZERS_PARALLELISM": "false"}
    # Busy-waiting OpenMP threads are many times slower when another job shares the cores.
    if "OMP_WAIT_POLICY" not in os.environ:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    if not torch.cuda.is_available() and "DS_ACCELERATOR" not in os.environ:
        env["DS_ACCELERATOR"] = "cpu"
    return env


def train(config: TrainConfig) -> None:
    """One training run in this process (the spawned one): the trainer, then the process group
    torn down, as ``recipes/train.py`` does."""
    from del_core.parallel import destroy
    from del_core.training import run

    try:
        run(config)
    finally:
        destroy()


def train_run(config: StudyConfig, loss: str, seed: int, run_dir: Path) -> None:
    """Train one (loss, seed) run into ``run_dir``. A leftover unfinished run there is removed
    first (its metrics.jsonl would be appended to)."""
    if run_dir.exists():
        print(f"[study]   removing the unfinished run in {run_dir}", flush=True)
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    training = train_config(config, loss, seed, run_dir)
    check_sources(training)
    what = f"training {loss} seed {seed}"
    try:
        run_spawned(train, training, run_dir.parent / f"{run_dir.name}.train.log", step_environment(config), what)
    except StepFailed as err:
        raise StudyError(str(err)) from None
    if not training_done(run_dir):
        raise StudyError(f"{what} exited 0 but wrote no final record in {run_dir}/metrics.jsonl")
