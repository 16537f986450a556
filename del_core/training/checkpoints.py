"""Crash-safe checkpoint bookkeeping around DeepSpeed's own save/load.

Layout: ``OUTPUT_DIR/checkpoints/step_000300/`` holds what ``engine.save_checkpoint`` wrote (every
rank's shards) and, written LAST by rank 0 after all ranks finished, ``COMPLETE.json`` (the trainer
state: step, config). A directory without that marker - a save that crashed half-way - is never
resumed from and is deleted when the next complete checkpoint lands. DeepSpeed's ``latest`` file is
not used (``save_latest=False``): the marker is the only source of truth.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Optional

MARKER = "COMPLETE.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def tag_for(step: int) -> str:
    return f"step_{step:06d}"


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` to ``path`` so that readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as handle:
        json.dump(payload, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_complete(checkpoint_dir: Path, state: dict) -> None:
    write_json_atomic(checkpoint_dir / MARKER, state)


def read_state(checkpoint_dir: Path) -> dict:
    """The trainer state of a complete checkpoint; ValueError naming the directory otherwise."""
    marker = checkpoint_dir / MARKER
    if not marker.is_file():
        raise ValueError(f"{checkpoint_dir} is not a complete checkpoint (no {MARKER}: the save did not finish)")
    try:
        return json.loads(marker.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{marker}: unreadable ({err})") from None


def list_checkpoints(root: Path) -> tuple[list[tuple[int, Path]], list[Path]]:
    """(complete checkpoints sorted by step, incomplete directories) under ``root``."""
    complete, incomplete = [], []
    if not root.is_dir():
        return complete, incomplete
    for path in root.iterdir():
        match = _STEP_DIR.match(path.name)
        if not match or not path.is_dir():
            continue
        (complete.append((int(match.group(1)), path)) if (path / MARKER).is_file() else incomplete.append(path))
    complete.sort()
    return complete, sorted(incomplete)


def newest_complete(root: Path) -> Optional[Path]:
    complete, _ = list_checkpoints(root)
    return complete[-1][1] if complete else None


def prune(root: Path, keep: int, current: Optional[Path] = None) -> list[Path]:
    """Delete incomplete directories other than ``current`` (one being written) and all but the
    newest ``keep`` complete checkpoints (keep = 0: keep all). Returns what was deleted."""
    complete, incomplete = list_checkpoints(root)
    doomed = [p for p in incomplete if p != current]
    if keep > 0:
        doomed += [p for _, p in complete[:-keep]]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
