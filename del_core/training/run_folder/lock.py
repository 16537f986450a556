"""One run per output folder: an advisory lock on ``OUTPUT_DIR/.lock`` and the check that a new
run does not write into a folder that already holds one.

The lock is ``fcntl.flock`` on the file, which also names its holder (``{"host", "pid"}``). The
kernel drops a flock when its holder dies, so a dead holder's file is simply taken over (with a
warning naming it). A lock still held by a process that no longer exists on this host (a forked
child kept the descriptor) is stale as well: the file is replaced and the new one locked.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from del_core.config import ConfigError

LOCK_FILE = ".lock"
# What a run writes into OUTPUT_DIR; run.overwrite=true removes these before a new run starts.
RUN_ARTEFACTS = (
    "metrics.jsonl",
    "run_status.json",
    "checkpoints",
    "final",
    "tensorboard",
    "heldout_answers.jsonl",
    "auto_loss_weight.json",
)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_holder(path: Path) -> Optional[dict]:
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and "pid" in holder else None


class RunLock:
    """The held lock of one output folder (:func:`acquire` makes one; :meth:`release` frees it)."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: Optional[int] = fd

    def release(self) -> None:
        """Remove the file (while still holding it) and drop the lock; idempotent."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def _try_lock(path: Path) -> Optional[int]:
    """A descriptor of ``path`` with the flock held, or None when another process holds it. Retries
    when the file was replaced between open and lock (the descriptor would lock a removed file)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def acquire(output_dir: Path, log: Callable[[str], None]) -> RunLock:
    """Lock ``output_dir`` for this process; ConfigError naming the holder when a live run holds it."""
    path = Path(output_dir) / LOCK_FILE
    host = socket.gethostname()
    previous = _read_holder(path)
    fd = _try_lock(path)
    if fd is None:
        holder = _read_holder(path) or {}
        if holder.get("host") == host and not _pid_alive(int(holder["pid"])):
            log(f"[lock] {path}: holder pid {holder['pid']} on {host} is gone; taking the stale lock over")
            path.unlink(missing_ok=True)
            fd = _try_lock(path)
        if fd is None:
            who = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
            raise ConfigError(f"run.output_dir {output_dir} is in use by another run ({who}, lock file {path})")
    elif previous is not None and previous.get("pid") != os.getpid():
        log(
            f"[lock] {path}: taking over the lock of pid {previous['pid']} on {previous.get('host', '?')}, "
            "which ended without releasing it"
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"host": host, "pid": os.getpid()}).encode(), 0)
    os.fsync(fd)
    return RunLock(path, fd)


def previous_run(output_dir: Path) -> list[str]:
    """The run artefacts already in ``output_dir`` (empty: a new or empty folder)."""
    return [name for name in RUN_ARTEFACTS if (Path(output_dir) / name).exists()]


def claim_folder(output_dir: Path, resume: str, overwrite: bool, log: Callable[[str], None]) -> None:
    """A run that starts from step 0 (``run.resume=no``) may not write into a folder holding another
    run's records: refused unless ``overwrite``, which removes them first."""
    if resume != "no":
        return
    found = previous_run(output_dir)
    if not found:
        return
    if not overwrite:
        status = ""
        try:
            saved = json.loads((Path(output_dir) / "run_status.json").read_text())
            status = f" (status {saved['status']} at step {saved['step']})"
        except (OSError, ValueError, KeyError):
            pass
        raise ConfigError(
            f"run.output_dir {output_dir} already holds a run{status}: continue it with run.resume=auto, "
            "or start over with run.overwrite=true (deletes its records and checkpoints)"
        )
    for name in found:
        target = Path(output_dir) / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    log(f"[run] run.overwrite=true: removed {', '.join(found)} from {output_dir}")
