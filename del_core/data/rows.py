"""Data rows (MathInstruct / Alpaca style, or conversations) from files, hub datasets or the generator.

A row is one of two forms, told apart by its fields:

* Alpaca: ``instruction`` (str), optional ``input`` (str) and ``output`` (str);
* a conversation: ``messages``, a list of ``{"role": "system" | "user" | "assistant", "content": str}``
  (OpenAI style), or ShareGPT's ``conversations``, a list of ``{"from": ..., "value": str}`` with
  roles ``human``/``gpt`` (or the OpenAI names). Both become ``{"messages": [...]}`` with the OpenAI
  names; a system turn may only come first, and at least one assistant turn must have text.

Sources: local ``.json`` (a list of rows) / ``.jsonl`` files or a folder of them, a Hugging Face hub
dataset name, or ``synthetic:N`` / ``synthetic:SET:N`` (:mod:`del_core.data.synthetic`). Every row is validated; errors
name the file (or dataset), the row and the field.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from del_core.data.jsonl import JsonlError, check_utf8, iter_jsonl, text_lines
from del_core.data.synthetic import PROBLEM_SETS, make_problems

REQUIRED_FIELDS = ("instruction", "output")
ROLES = ("system", "user", "assistant")
# ShareGPT's speaker names, and the OpenAI ones as they are.
ROLE_NAMES = {"human": "user", "gpt": "assistant", **{role: role for role in ROLES}}


class DataError(ValueError):
    """A malformed data file or row; the message names the file and row."""


@dataclass(frozen=True)
class SourceRow:
    """A validated row and where it came from ("FILE: row N"), for error messages further on."""

    where: str
    row: dict


def is_conversation(row: dict) -> bool:
    """Whether a validated row is a conversation (``messages``) rather than an Alpaca row."""
    return "messages" in row


def _text_field(item: dict, name: str, where: str) -> str:
    if name not in item or item[name] is None:
        raise DataError(f"{where}: field {name!r} is missing")
    if not isinstance(item[name], str):
        raise DataError(f"{where}: field {name!r} must be text, got {type(item[name]).__name__}")
    return item[name]


def _check_message(item: Any, where: str, role_key: str, content_key: str) -> dict[str, str]:
    if not isinstance(item, dict):
        raise DataError(f"{where}: expected an object with {role_key!r} and {content_key!r}, got {type(item).__name__}")
    speaker = _text_field(item, role_key, where)
    if speaker not in ROLE_NAMES:
        raise DataError(f"{where}: field {role_key!r} is {speaker!r}, not one of {', '.join(ROLE_NAMES)}")
    return {"role": ROLE_NAMES[speaker], "content": _text_field(item, content_key, where)}


def _check_conversation(row: dict, where: str) -> dict[str, list[dict[str, str]]]:
    """``{"messages": [...]}`` of a ``messages`` or ShareGPT ``conversations`` row (module docstring)."""
    field_name, keys = ("messages", ("role", "content")) if "messages" in row else ("conversations", ("from", "value"))
    turns = row[field_name]
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{where}: field {field_name!r} must be a non-empty list of turns")
    messages = [_check_message(item, f"{where}: {field_name}[{i}]", *keys) for i, item in enumerate(turns)]
    for i, message in enumerate(messages):
        if message["role"] == "system" and i > 0:
            raise DataError(f"{where}: {field_name}[{i}]: a system turn may only come first")
    if not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        raise DataError(f"{where}: field {field_name!r} has no assistant turn with text (nothing to train on)")
    return {"messages": messages}


def _check_alpaca(row: dict, where: str) -> dict[str, str]:
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise DataError(f"{where}: field {name!r} is missing")
    for name in REQUIRED_FIELDS + ("input",):
        if name in row and row[name] is not None and not isinstance(row[name], str):
            raise DataError(f"{where}: field {name!r} must be text, got {type(row[name]).__name__}")
    if not row["output"].strip():
        raise DataError(f"{where}: field 'output' is empty")
    return {"instruction": row["instruction"], "input": row.get("input") or "", "output": row["output"]}


def check_row(row: Any, where: str) -> dict:
    """The normalised row (module docstring) of one raw row; :class:`DataError` names ``where``
    and the field."""
    if not isinstance(row, dict):
        raise DataError(
            f"{where}: expected an object with 'instruction' and 'output' (or 'messages'), got {type(row).__name__}"
        )
    if "messages" in row or "conversations" in row:
        return _check_conversation(row, where)
    return _check_alpaca(row, where)


def _iter_file(path: Path) -> Iterator[SourceRow]:
    if path.suffix == ".jsonl":
        try:
            for number, row in iter_jsonl(path):
                where = f"{path}: row {number}"
                yield SourceRow(where, check_row(row, where))
        except JsonlError as err:
            raise DataError(str(err).replace(": line ", ": row ", 1)) from None
        return
    try:
        data = json.loads("".join(text for _, text in text_lines(path)))
    except JsonlError as err:
        raise DataError(str(err)) from None
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: a .json data file must hold a list of rows")
    for index, row in enumerate(data):
        yield SourceRow(f"{path}: row {index}", check_row(row, f"{path}: row {index}"))


def data_files(source: str | Path) -> list[Path]:
    """The .json/.jsonl files of a file or folder source (a folder's sorted by name)."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
        if not files:
            raise DataError(f"{path}: no .json or .jsonl files")
        return files
    if path.is_file():
        if path.suffix not in (".json", ".jsonl"):
            raise DataError(f"{path}: data files must be .json or .jsonl")
        return [path]
    raise DataError(f"data source {source} does not exist")


def load_rows(source: str | Path) -> list[dict]:
    """Rows from a .json/.jsonl file or a folder of them (sorted by name), validated."""
    return [item.row for file in data_files(source) for item in _iter_file(file)]


@dataclass(frozen=True)
class SyntheticSpec:
    """``synthetic:N`` (N rows of the training problem set) or ``synthetic:SET:N`` (of the set SET
    of :data:`del_core.data.synthetic.PROBLEM_SETS`)."""

    set_name: str
    count: int

    @classmethod
    def parse(cls, spec: str) -> SyntheticSpec:
        """The spec's parts; :class:`DataError` naming the spec for a bad count or set."""
        parts = spec.split(":")
        set_name = parts[1] if len(parts) == 3 else "training"
        count = parts[-1]
        if len(parts) not in (2, 3) or not count.isdigit() or int(count) <= 0:
            raise DataError(f"data {spec!r}: expected synthetic:N or synthetic:SET:N with N > 0")
        if set_name not in PROBLEM_SETS:
            raise DataError(f"data {spec!r}: unknown problem set {set_name!r}; choose from {', '.join(PROBLEM_SETS)}")
        return cls(set_name, int(count))

    def rows(self, seed: int, exclude: Collection[str] = (), distinct: bool = False) -> list[dict[str, str]]:
        """The spec's rows for ``seed`` (:func:`del_core.data.synthetic.make_problems`)."""
        try:
            return make_problems(self.count, seed, self.set_name, exclude, distinct)
        except ValueError as err:
            raise DataError(f"data synthetic:{self.set_name}:{self.count}: {err}") from None


def check_source(spec: str, what: str = "data") -> None:
    """Raise :class:`DataError` when ``spec`` cannot name data: a local file or folder whose files
    are not all UTF-8 text (naming the file and row), a synthetic spec that does not parse, or a
    missing path. A hub name is only checked for its form (the hub may not be reachable from here)."""
    if spec.startswith("synthetic:"):
        SyntheticSpec.parse(spec)
        return
    path = Path(spec).expanduser()
    if path.exists():
        _check_text(path)
        return
    if spec.endswith((".json", ".jsonl")) or spec.startswith((".", "/", "~")):
        raise DataError(f"{what} {spec}: no such file or directory")


def _check_text(source: Path) -> None:
    """Every data file of ``source`` is UTF-8 text: a bad row named before anything loads (one
    read of the files, at disk speed; the rows themselves are checked as they are read)."""
    for path in data_files(source):
        try:
            check_utf8(path)
        except JsonlError as err:
            row = ": row " if path.suffix == ".jsonl" else ": line "  # a .jsonl file's lines are its rows
            raise DataError(str(err).replace(": line ", row, 1)) from None


def is_local(spec: str) -> bool:
    """Whether ``spec`` names local files (else ``synthetic:N`` or a hub dataset)."""
    return not spec.startswith("synthetic:") and (Path(spec).exists() or spec.endswith((".json", ".jsonl")))


def _iter_hub(spec: str, split: str) -> Iterator[SourceRow]:
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
    for index, row in enumerate(table):
        where = f"{spec} [{split}]: row {index}"
        yield SourceRow(where, check_row(row, where))


def iter_source(spec: str, split: str = "train", seed: int = 0) -> Iterator[SourceRow]:
    """The rows of a data spec one at a time, validated, with where each came from: ``synthetic:N``
    (this project's arithmetic generator, seeded), a local .json/.jsonl file or folder, or a Hugging
    Face hub dataset name (e.g. TIGER-Lab/MathInstruct, needs network or a populated HF cache)."""
    if spec.startswith("synthetic:"):
        for index, row in enumerate(SyntheticSpec.parse(spec).rows(seed)):
            yield SourceRow(f"{spec} (seed {seed}): row {index}", row)
    elif is_local(spec):
        for file in data_files(spec):
            yield from _iter_file(file)
    else:
        yield from _iter_hub(spec, split)


def read_source(spec: str, split: str = "train", seed: int = 0) -> list[dict]:
    """Every row of :func:`iter_source`, in order. Errors name the row."""
    return [item.row for item in iter_source(spec, split, seed)]
