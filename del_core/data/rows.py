"""Instruction rows (MathInstruct / Alpaca style) from files, hub datasets or the generator.

A row is a dict with ``instruction`` (str), optional ``input`` (str) and ``output`` (str). Sources:
local ``.json`` (a list of rows) / ``.jsonl`` files or a folder of them, a Hugging Face hub dataset
name, or ``synthetic:N`` (:mod:`del_core.data.synthetic`). Every row is validated; errors name the
file (or dataset) and the row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from del_core.data.jsonl import JsonlError, iter_jsonl

REQUIRED_FIELDS = ("instruction", "output")


class DataError(ValueError):
    """A malformed data file or row; the message names the file and row."""


def _check_row(row: Any, where: str) -> dict[str, str]:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object with 'instruction' and 'output', got {type(row).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise DataError(f"{where}: field {name!r} is missing")
    for name in REQUIRED_FIELDS + ("input",):
        if name in row and row[name] is not None and not isinstance(row[name], str):
            raise DataError(f"{where}: field {name!r} must be text, got {type(row[name]).__name__}")
    if not row["output"].strip():
        raise DataError(f"{where}: field 'output' is empty")
    return {"instruction": row["instruction"], "input": row.get("input") or "", "output": row["output"]}


def _read_file(path: Path) -> list[dict[str, str]]:
    if path.suffix == ".jsonl":
        try:
            return [_check_row(row, f"{path}: row {number}") for number, row in iter_jsonl(path)]
        except JsonlError as err:
            raise DataError(str(err).replace(": line ", ": row ", 1)) from None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: a .json data file must hold a list of rows")
    return [_check_row(row, f"{path}: row {index}") for index, row in enumerate(data)]


def load_rows(source: str | Path) -> list[dict[str, str]]:
    """Rows from a .json/.jsonl file or a folder of them (sorted by name), validated."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
        if not files:
            raise DataError(f"{path}: no .json or .jsonl files")
    elif path.is_file():
        if path.suffix not in (".json", ".jsonl"):
            raise DataError(f"{path}: data files must be .json or .jsonl")
        files = [path]
    else:
        raise DataError(f"data source {source} does not exist")
    return [row for file in files for row in _read_file(file)]


def _synthetic_count(spec: str) -> int:
    count = spec.split(":", 1)[1]
    if not count.isdigit() or int(count) <= 0:
        raise DataError(f"data {spec!r}: expected synthetic:N with N > 0")
    return int(count)


def check_source(spec: str, what: str = "data") -> None:
    """Raise :class:`DataError` when ``spec`` cannot name data (nothing is read; a hub name is
    only checked for its form, since the hub may not be reachable from here)."""
    if spec.startswith("synthetic:"):
        _synthetic_count(spec)
        return
    path = Path(spec).expanduser()
    if path.exists():
        return
    if spec.endswith((".json", ".jsonl")) or spec.startswith((".", "/", "~")):
        raise DataError(f"{what} {spec}: no such file or directory")


def read_source(spec: str, split: str = "train", seed: int = 0) -> list[dict[str, str]]:
    """Rows of a data spec: ``synthetic:N`` (this project's arithmetic generator, seeded), a local
    .json/.jsonl file or folder, or a Hugging Face hub dataset name (e.g. TIGER-Lab/MathInstruct,
    needs network or a populated HF cache). Every row is validated; errors name the row."""
    if spec.startswith("synthetic:"):
        from del_core.data.synthetic import make_problems

        return make_problems(_synthetic_count(spec), seed=seed)
    if Path(spec).exists() or spec.endswith((".json", ".jsonl")):
        return load_rows(spec)
    try:
        import datasets
    except ImportError:
        raise DataError(f"data {spec!r} is no local file, and the `datasets` package is not installed") from None
    try:
        table = datasets.load_dataset(spec, split=split)
    except Exception as err:  # network, unknown name, missing split: say which source failed
        raise DataError(
            f"data {spec!r}: neither a local file nor a loadable hub dataset ({type(err).__name__}: {err})"
        ) from None
    return [_check_row(row, f"{spec} [{split}]: row {index}") for index, row in enumerate(table)]
