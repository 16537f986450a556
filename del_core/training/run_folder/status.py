"""``OUTPUT_DIR/run_status.json`` and the signals that stop a run cleanly.

The status file is ``{"status": "running" | "stopped" | "finished" | "failed" | "interrupted",
"step": N}``; the launchers (launch/slurm) read it to decide whether to requeue ("stopped"). A run
that ends never leaves it "running": an exception marks it "failed", a second Ctrl-C "interrupted".

SIGTERM or SIGUSR1 (slurm pre-emption, time limit) and SIGINT (Ctrl-C) ask the trainer to finish the
current step, write a checkpoint, mark the run "stopped" and exit: 0 after SIGTERM/SIGUSR1 (the
launchers requeue), 130 after SIGINT, with the resume command printed. A second SIGINT stops at
once: no checkpoint, no traceback, status "interrupted", exit 130.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Optional

from del_core.data.jsonl import write_json

RUN_STATUS = "run_status.json"
SIGINT_EXIT = 130  # 128 + SIGINT, the shell's code for a run stopped by Ctrl-C


def write_status(output_dir: Path, status: str, step: int) -> None:
    write_json(Path(output_dir) / RUN_STATUS, {"status": status, "step": step})


class StopRequest:
    """Set when SIGTERM, SIGUSR1 or SIGINT arrives; the trainer polls :attr:`requested` after each
    step. ``announce`` (rank 0): print what a Ctrl-C does. :attr:`status_dir` (set by rank 0 once
    it has written the status "running") gets "interrupted" on a second SIGINT, at :attr:`step`
    (the trainer keeps it current)."""

    def __init__(self, announce: bool = False) -> None:
        self.requested = False
        self.signum: Optional[int] = None
        self.announce = announce
        self.status_dir: Optional[Path] = None
        self.step = 0
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            signal.signal(sig, self._handle)

    @property
    def exit_code(self) -> int:
        """The process's exit code after a clean stop: 130 after SIGINT, 0 after SIGTERM/SIGUSR1."""
        return SIGINT_EXIT if self.signum == signal.SIGINT else 0

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            self._stop_now()
        self.requested = True
        self.signum = signum
        if signum == signal.SIGINT and self.announce:
            print(
                "\n[stop] Ctrl-C: finishing the current step, then writing a checkpoint "
                "(Ctrl-C again stops at once, without one)",
                file=sys.stderr,
                flush=True,
            )

    def _stop_now(self) -> None:
        if self.status_dir is not None:
            write_status(self.status_dir, "interrupted", self.step)
        if self.announce:
            print(
                f"\n[stop] second Ctrl-C: stopped at once after step {self.step} without a checkpoint; "
                "resume from the newest checkpoint with run.resume=auto",
                file=sys.stderr,
                flush=True,
            )
        os._exit(SIGINT_EXIT)
