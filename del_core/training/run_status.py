"""``OUTPUT_DIR/run_status.json`` and the signals that stop a run cleanly.

The status file is ``{"status": "running" | "stopped" | "finished", "step": N}``; the launchers
(launch/slurm) read it to decide whether to requeue. SIGTERM or SIGUSR1 (slurm pre-emption, time
limit) ask the trainer to finish the current step, write a checkpoint, mark the run "stopped" and
exit 0.
"""

from __future__ import annotations

import signal
from pathlib import Path

from del_core.training.checkpoints import write_json_atomic

RUN_STATUS = "run_status.json"


def write_status(output_dir: Path, status: str, step: int) -> None:
    write_json_atomic(Path(output_dir) / RUN_STATUS, {"status": status, "step": step})


class StopRequest:
    """Set when SIGTERM or SIGUSR1 arrives; the trainer polls :attr:`requested` after each step."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True
