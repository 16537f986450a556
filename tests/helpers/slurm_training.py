"""Training jobs on the Slurm test cluster (tests/helpers/slurm_cluster.py): the unmodified
launch/slurm/train.sbatch submitted with ``sbatch`` on CPU, and what a test reads of them."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from helpers.slurm_cluster import ClusterError, SlurmCluster
from helpers.training import REPO, tiny_run

SBATCH = REPO / "launch" / "slurm" / "train.sbatch"
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING")


@dataclass(frozen=True)
class TrainingJob:
    """A submitted training job: its id, OUTPUT_DIR and the job log (``logs/%x-%j.out``)."""

    job_id: int
    output_dir: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else f"(no job log {self.log})"

    def node_log(self, rank: int) -> str:
        return (self.output_dir / "logs" / f"node{rank}.log").read_text(errors="replace")

    def describe(self) -> str:
        """The job log and the node logs (their ends), for an error message."""
        nodes = sorted((self.output_dir / "logs").glob("*"))
        return f"--- job log\n{self.log_text()[-4000:]}\n" + "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in nodes
        )


def submit_training(
    cluster: SlurmCluster,
    model: Path,
    work: Path,
    name: str,
    steps: int,
    procs_per_node: int = 1,
    options: Sequence[str] = (),
    env: Optional[dict] = None,
    **overrides,
) -> TrainingJob:
    """``sbatch [options] launch/slurm/train.sbatch`` from ``work`` (2 nodes unless ``options``
    say otherwise, ``procs_per_node`` CPU processes each): ``steps`` steps of DEL on ``model``
    (global batch 4 = micro 1 x accumulation x ranks, 24 synthetic problems, ``overrides`` on
    top) into ``work/name``; ``env`` on top of the job's environment."""
    out = work / name
    run = tiny_run(model, work / "cache", **{
        "data": "synthetic:24", "data.max_length": 96, "run.global_batch_size": 4, "run.micro_batch_size": 1,
        "run.max_steps": steps, **overrides,
    })  # fmt: skip
    job_env = {
        **os.environ,
        "OUTPUT_DIR": str(out),
        "GPUS_PER_NODE": "0",
        "CPU_PROCS_PER_NODE": str(procs_per_node),
        "DEL_REPO": str(REPO),  # the job runs from work/, not from the checkout
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    (work / "logs").mkdir(exist_ok=True)
    job_id = cluster.submit([SBATCH, *(f"{k}={v}" for k, v in run.items())], cwd=work, env=job_env, options=options)
    return TrainingJob(job_id, out, work / "logs" / f"del-train-{job_id}.out")


def train_records(out: Path) -> list[dict]:
    """The train records of OUTPUT_DIR/metrics.jsonl written so far (a line being written is skipped)."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return [r for r in rows if r.get("kind") == "train"]


def wait_for_step(cluster: SlurmCluster, job: TrainingJob, step: int, timeout: float = 240) -> None:
    """Until OUTPUT_DIR/metrics.jsonl holds step ``step``; ClusterError when the job ends first."""
    deadline = time.monotonic() + timeout
    while not any(r["step"] >= step for r in train_records(job.output_dir)):
        info = cluster.job(job.job_id)
        if info.state not in LIVE_STATES or time.monotonic() > deadline:
            raise ClusterError(f"job {job.job_id} has no step {step} ({info})\n{job.describe()}")
        time.sleep(0.2)
