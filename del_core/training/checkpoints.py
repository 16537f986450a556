"""Crash-safe checkpoint bookkeeping around DeepSpeed's own save/load.

Layout: ``OUTPUT_DIR/checkpoints/step_000300/`` holds what ``engine.save_checkpoint`` wrote (every
rank's shards) and, written LAST by rank 0 after all ranks finished, ``COMPLETE.json`` (the trainer
state: step, config). A directory without that marker - a save that crashed half-way - is never
resumed from and is deleted when the next complete checkpoint lands. DeepSpeed's ``latest`` file is
not used (``save_latest=False``): the marker is the only source of truth.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from del_core.config import ConfigError
from del_core.parallel import ParallelDims, barrier

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


# --- saving and resuming a DeepSpeed engine ------------------------------------------------------
@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint must share with the run that resumes it: with any of these changed the
    batches of step s would differ (``total_steps`` and ``loss`` are recorded, not compared)."""

    tp: int
    num_items: int
    global_batch_size: int
    seed: int
    data: str
    packing: bool
    max_length: int
    total_steps: int
    loss: str
    # "off", or the LoRA settings (LoraSettings.describe()): a LoRA checkpoint holds the adapters
    # and their optimizer state only, so it fits no other model layout. Absent in older markers.
    lora: str = "off"
    prompt_format: str = "alpaca"  # the template the tokens were made with (absent in older markers)

    COMPARED = ("tp", "num_items", "global_batch_size", "seed", "data", "packing", "max_length", "lora")
    COMPARED += ("prompt_format",)
    DEFAULTS = {"lora": "off", "prompt_format": "alpaca"}  # what a marker written before a key existed means

    @property
    def frozen_weights_excluded(self) -> bool:
        """A LoRA run leaves its frozen base weights out of checkpoints (they are reloaded from
        the model source on resume): a 7B base is not rewritten at every save."""
        return self.lora != "off"


def save(
    engine: Any,
    output_dir: Path,
    step: int,
    identity: RunIdentity,
    dims: ParallelDims,
    keep: int,
    log: Callable[[str], None],
) -> Path:
    """Write ``checkpoints/step_NNNNNN`` (DeepSpeed shards, each rank's RNG state), then rank 0's
    marker once every rank has finished, then prune to the newest ``keep``. Collective."""
    root, tag = checkpoint_root(output_dir), tag_for(step)
    started = time.time()
    engine.save_checkpoint(
        str(root), tag=tag, save_latest=False, exclude_frozen_parameters=identity.frozen_weights_excluded
    )
    torch.save(torch.get_rng_state(), root / tag / f"rng_rank{dims.rank}.pt")
    barrier()  # every rank's shards are on disk
    if dims.is_main:
        mark_complete(root / tag, {**dataclasses.asdict(identity), "step": step})
        removed = prune(root, keep)
        log(
            f"[checkpoint] step {step} saved to {root / tag} in {time.time() - started:.1f} s"
            + (f"; removed {', '.join(p.name for p in removed)}" if removed else "")
        )
    barrier()
    return root / tag


def _checkpoint_to_resume(resume: str, output_dir: Path, log: Callable[[str], None]) -> Optional[Path]:
    if resume == "no":
        return None
    if resume != "auto":
        return Path(resume)
    root = checkpoint_root(output_dir)
    complete, incomplete = list_checkpoints(root)
    for path in incomplete:
        log(f"[resume] ignoring {path}: incomplete (no {MARKER})")
    if not complete:
        log(f"[resume] no complete checkpoint in {root}: starting from step 0")
        return None
    return complete[-1][1]


def resume(
    engine: Any, resume: str, output_dir: Path, identity: RunIdentity, dims: ParallelDims, log: Callable[[str], None]
) -> int:
    """Load the checkpoint ``resume`` names (``no``, ``auto`` = the newest complete one, or a
    directory) into ``engine``; the step to continue from (0: a fresh start)."""
    path = _checkpoint_to_resume(resume, output_dir, log)
    if path is None:
        return 0
    saved = read_state(path)
    current = dataclasses.asdict(identity)
    for key in RunIdentity.COMPARED:
        written = saved.get(key, RunIdentity.DEFAULTS.get(key))
        if written != current[key]:
            why = {"lora": "the model layout would differ", "prompt_format": "the training tokens would differ"}.get(
                key, "the data order would differ"
            )
            raise ConfigError(
                f"resume: {path} was written with {key}={written!r}, this run has {current[key]!r}: {why}"
            )
    # Without the frozen weights in the checkpoint the module load cannot be strict; the trainable
    # ones are all there (and are restored from the optimizer's fp32 copy as well).
    load_path, _ = engine.load_checkpoint(
        str(path.parent), tag=path.name, load_module_strict=not identity.frozen_weights_excluded
    )
    if load_path is None:
        raise RuntimeError(f"resume: DeepSpeed could not load {path}")
    rng = path / f"rng_rank{dims.rank}.pt"
    if rng.is_file():
        torch.set_rng_state(torch.load(rng))
    log(f"[resume] continuing from {path} (step {saved['step']})")
    return int(saved["step"])
