"""Run one unit's step (a training run, an evaluation) in a fresh process.

The step is a library call, ``target(argument)``, run in a process of multiprocessing's "spawn"
context: the state it sets up (DeepSpeed, torch.distributed, CUDA, OpenMP thread pools) never
reaches the experiment's own process, and each step starts from the same clean interpreter. Its
stdout and stderr go to a log file; a failure raises :class:`StepFailed` with the log's tail.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

LOG_TAIL = 4000  # characters of the log quoted by StepFailed


class StepFailed(RuntimeError):
    """A step exited with an error; the message names it, its exit status and the end of its log."""


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` updated with ``env`` inside the block (a spawned process starts with it)."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _child(target: Callable[[Any], Any], argument: Any, log_path: str) -> None:
    """The spawned process: stdout and stderr into the log, then the step; exit status 1 (with the
    traceback in the log) when it raises, its own status when it returns a nonzero int."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        status = target(argument)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(status, int) and not isinstance(status, bool) and status != 0:
        os._exit(status)


def run_spawned(target: Callable[[Any], Any], argument: Any, log_path: Path, env: Mapping[str, str], what: str) -> None:
    """``target(argument)`` in a spawned process with ``env`` added to its environment and its
    output in ``log_path``; :class:`StepFailed` naming ``what`` when it fails. ``target`` is a
    module-level function and ``argument`` picklable (a typed config)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process = multiprocessing.get_context("spawn").Process(target=_child, args=(target, argument, str(log_path)))
    with _environment(env):
        process.start()
    process.join()
    if process.exitcode != 0:
        tail = log_path.read_text(errors="replace")[-LOG_TAIL:] if log_path.is_file() else ""
        raise StepFailed(f"{what} failed (exit {process.exitcode}); log {log_path}:\n{tail}")
