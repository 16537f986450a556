"""An experiment's output root: fingerprinted, resumable, with atomic per-unit done markers.

The fingerprint is the settings that change results. The first invocation records it in
ROOT/experiment.json; a later one on the same root with a different fingerprint is refused with
the keys that differ (one table never mixes two set-ups). The resumable keys (more seeds or
losses, threads, workers...) may differ: they are recorded, not compared.

A unit is done when its marker exists: a JSON file written atomically (staged, then renamed into
place), so an interrupted write leaves no marker and the unit runs again; a marker that does not
parse (torn by a crash of the file system) counts as absent too.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Optional

from del_core.config import ConfigError
from del_core.data.jsonl import write_json

RECORD = "experiment.json"


class ResumeRefused(ConfigError):
    """The output root holds an experiment with other result-changing settings."""


def fingerprint(settings: Mapping[str, Any], resumable: Collection[str]) -> dict[str, Any]:
    """The settings that change results: every key of ``settings`` but the ``resumable`` ones."""
    return {key: value for key, value in settings.items() if key not in resumable}


def changed_keys(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between two fingerprints (present in one only included), sorted."""
    return sorted(key for key in recorded.keys() | current.keys() if recorded.get(key) != current.get(key))


def claim(root: Path, settings: Mapping[str, Any], resumable: Collection[str], what: str = "an experiment") -> None:
    """Record ``settings`` (JSON-able) as ROOT's experiment, or refuse (:class:`ResumeRefused`,
    naming the changed keys with their recorded and new values) when ROOT holds ``what`` with
    another fingerprint. The resumable keys' values are recorded as given this time."""
    root = Path(root)
    current = fingerprint(settings, resumable)
    record = read_marker(root / RECORD)
    if record is not None:
        recorded = record.get("fingerprint", {})
        changed = changed_keys(recorded, current)
        if changed:
            detail = "; ".join(f"{k}: {recorded.get(k)!r} -> {current.get(k)!r}" for k in changed)
            raise ResumeRefused(
                f"{root} holds {what} with other values of {changed} ({detail}): use another output_root "
                "(or delete that folder) to run this configuration"
            )
    root.mkdir(parents=True, exist_ok=True)
    resumed = {key: value for key, value in settings.items() if key in resumable}
    write_marker(root / RECORD, {"fingerprint": current, "resumable": resumed})


def write_marker(path: Path, data: Any, indent: int = 1) -> Path:
    """Write the JSON ``data`` to ``path`` atomically: the marker is either whole or absent."""
    return write_json(path, data, indent)


def read_marker(path: Path) -> Optional[Any]:
    """The JSON of the marker at ``path``; None when it is absent or does not parse (the unit runs again)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
