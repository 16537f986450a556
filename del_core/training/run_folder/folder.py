"""The output folder of one run, as one rank sees it: the one object through which the trainer
keeps its bookkeeping in ``run.output_dir``.

    folder = RunFolder(output_dir, dims, log)
    folder.claim(resume, overwrite)                 # rank 0: the lock; refuse or clear another run's folder
    checkpoint = folder.find_resume(config, items, total_steps, device)  # verified, identity checked
    step = folder.restore(engine, exclude_frozen)   # after the engine exists (0 without a checkpoint)
    reporter = folder.begin(step, config, total_steps, stop)  # metrics cut back, status "running"
    folder.save_checkpoint(engine, step, keep, exclude_frozen)  # every save_every steps, and at a stop
    folder.mark_stopped(step) | folder.finish(step, answers) | folder.mark_failed(step)
    folder.close()                                  # the lock released

What each part guarantees is in its module: :mod:`.lock` (one run per folder),
:mod:`.identity` (a resume computes what its checkpoint's run computed), :mod:`.checkpoints`
(crash-safe, verified checkpoints), :mod:`.status` (``run_status.json`` and the stop signals),
:mod:`del_core.training.records` (``metrics.jsonl``). Every method may be called on every rank;
what only rank 0 writes (the lock, the status, the records, the markers) it decides itself.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Union

import torch

from del_core.config import config_to_dict
from del_core.data.jsonl import write_jsonl
from del_core.parallel import ParallelDims, barrier, max_over
from del_core.training.config import TrainConfig
from del_core.training.records import ResumeRecord, cut_back
from del_core.training.reporting import Reporter, SilentReporter
from del_core.training.run_folder import checkpoints, lock
from del_core.training.run_folder.checkpoints import Resumable
from del_core.training.run_folder.identity import Override, compare, run_identity, saved_identity
from del_core.training.run_folder.status import StopRequest, write_status

METRICS = "metrics.jsonl"
FINAL_MODEL = "final"  # the Hugging Face export of a finished run
HELDOUT_ANSWERS = "heldout_answers.jsonl"  # every greedy held-out answer, before and after


class RunFolder:
    """``OUTPUT_DIR`` of one run: its lock, identity, status file, records and checkpoints.

    ``dims``: this rank's place in the world (rank, world size, rank 0 or not; the groups are not
    used). ``log``: rank 0's console line.
    """

    def __init__(self, path: Path, dims: ParallelDims, log: Callable[[str], None]):
        self.path = Path(path)
        self.dims = dims
        self.log = log
        self.identity: dict[str, Any] = {}  # what a checkpoint must share with the run resuming it
        self.overrides: list[Override] = []  # identity keys changed on purpose by resumes, oldest first
        self.resumable: Optional[Resumable] = None  # the verified checkpoint this run continues
        self._lock: Optional[lock.RunLock] = None
        self._status_written = False

    # --- the start --------------------------------------------------------------------------------
    def claim(self, resume: str, overwrite: bool) -> None:
        """Make the folder and, on rank 0, lock it before anything is written into it; a run from
        step 0 into a folder holding another run is refused, or clears it with ``overwrite``."""
        self.path.mkdir(parents=True, exist_ok=True)
        if self.dims.is_main:
            self._lock = lock.acquire(self.path, self.log)
            lock.claim_folder(self.path, resume, overwrite, self.log)

    def find_resume(
        self, config: TrainConfig, num_items: int, total_steps: int, device: torch.device
    ) -> Optional[Resumable]:
        """The run's identity, and the verified checkpoint ``run.resume`` names checked against it
        (None: the run starts at step 0). Before the model is loaded, a resume that would compute
        differently is refused (ConfigError), unless ``run.resume_override`` names each key it
        changes. Collective: the ranks verify the checkpoint together and agree on it."""
        self.identity = run_identity(config, num_items, total_steps, self.dims.world)
        share = (self.dims.rank, self.dims.world)
        self.resumable = checkpoints.choose(
            config.run.resume, self.path, self.log, share, lambda intact: _every_rank(intact, device)
        )
        if self.resumable is None:
            return None
        saved, step = self.resumable.state, self.resumable.step
        self.overrides = [Override(**o) for o in saved.get("overrides", [])]
        where = str(self.resumable.path)
        changed = compare(where, saved_identity(saved), self.identity, list(config.run.resume_override), step)
        self.overrides += changed
        for o in changed:
            self.log(f"[resume] run.resume_override: {o.key} {o.saved!r} -> {o.now!r} from step {o.step + 1}")
        return self.resumable

    def restore(self, engine: Any, exclude_frozen: bool) -> int:
        """Load the checkpoint :meth:`find_resume` chose into ``engine`` (and this rank's RNG
        state); the step to continue from (0 when there is none)."""
        if self.resumable is None:
            return 0
        return checkpoints.load(engine, self.resumable, self.dims, exclude_frozen, self.log)

    def changed_at(self, step: int) -> dict[str, list]:
        """The identity keys whose new values take effect after ``step``: key -> [checkpoint's
        value, new value] (empty unless this run resumed from ``step`` with overrides)."""
        return {o.key: [o.saved, o.now] for o in self.overrides if o.step == step}

    def begin(
        self, step: int, config: TrainConfig, total_steps: int, stop: StopRequest
    ) -> Union[Reporter, SilentReporter]:
        """The records of a run that trains from ``step``: rank 0 cuts ``metrics.jsonl`` back to
        it (no step is logged twice), marks the status "running" (a second Ctrl-C through ``stop``
        marks it "interrupted") and opens the reporter, which logs a resume's overrides first.
        The other ranks get a silent reporter."""
        if not self.dims.is_main:
            return SilentReporter()
        removed = cut_back(self.path / METRICS, step)
        if removed:
            self.log(f"[resume] {METRICS} cut back to step {step} ({removed} later records removed)")
        self.mark_running(step, stop)
        run = config.run
        reporter = Reporter(
            self.path, run.report_to, total_steps, step, self.path.name, config_to_dict(config), run.wandb_project
        )
        changed = self.changed_at(step)
        if changed:
            reporter.log(ResumeRecord(step, str(self.resumable.path), changed))
        return reporter

    def mark_running(self, step: int, stop: StopRequest) -> None:
        """Rank 0: status "running" at ``step``; from now on the run never ends leaving it so."""
        if self.dims.is_main:
            write_status(self.path, "running", step)
            self._status_written = True
            stop.status_dir = self.path

    # --- during the run ---------------------------------------------------------------------------
    def save_checkpoint(self, engine: Any, step: int, keep: int, exclude_frozen: bool) -> Path:
        """``checkpoints/step_NNNNNN`` with the run's identity and overrides in its marker, the
        newest ``keep`` kept (:func:`.checkpoints.save`). Collective."""
        state = {"identity": self.identity, "overrides": [dataclasses.asdict(o) for o in self.overrides]}
        return checkpoints.save(engine, self.path, step, state, self.dims, keep, self.log, exclude_frozen)

    def mark_stopped(self, step: int) -> None:
        """After the checkpoint of a stop signal's step: the resume command, status "stopped" (the
        launchers requeue the job). Collective."""
        self.log(f"[stop] signal received: checkpoint of step {step} written; resume with:")
        self.log("  " + shlex.join([os.path.basename(sys.executable), *sys.argv, "run.resume=auto"]))
        if self.dims.is_main:
            write_status(self.path, "stopped", step)
        barrier()

    # --- the end ----------------------------------------------------------------------------------
    @property
    def final_model(self) -> Path:
        """Where the export of a finished run goes (written whole or not at all)."""
        return self.path / FINAL_MODEL

    def finish(self, step: int, answers: list[dict]) -> None:
        """Rank 0: the greedy held-out answers (``heldout_answers.jsonl``, when there are any)
        and status "finished" at ``step``."""
        if not self.dims.is_main:
            return
        if answers:
            write_jsonl(self.path / HELDOUT_ANSWERS, answers)
            self.log(f"[eval] greedy answers before and after written to {self.path / HELDOUT_ANSWERS}")
        write_status(self.path, "finished", step)

    def mark_failed(self, step: int) -> None:
        """An exception ends the run: a status this rank wrote says "failed" (never left "running")."""
        if self._status_written:
            write_status(self.path, "failed", step)

    def close(self) -> None:
        """Release the folder's lock (rank 0); idempotent."""
        if self._lock is not None:
            self._lock.release()


def _every_rank(intact: bool, device: torch.device) -> bool:
    """Whether every rank found its share of a checkpoint intact (collective)."""
    damaged = torch.tensor([0.0 if intact else 1.0], device=device)
    return max_over(damaged).item() == 0.0
