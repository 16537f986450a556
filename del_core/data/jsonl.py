"""The one JSON-lines reader and writer of the project (data rows, metrics, predictions)."""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    """A line of a JSON-lines file that is not a JSON object, or of a text file that is not UTF-8;
    the message names file and line."""


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for every line of ``path`` read as UTF-8; :class:`JsonlError` names the
    first line that is not UTF-8 (and the byte in it), so that one bad row is found, not an offset."""
    path = Path(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                byte = f"byte {err.start + 1} of the line is 0x{raw[err.start]:02x}"
                raise JsonlError(f"{path}: line {number}: not UTF-8 text ({byte})") from None


def check_utf8(path: str | Path) -> None:
    """:class:`JsonlError` naming the first line of ``path`` that is not UTF-8. Reads the file once in
    16 MiB blocks, an ASCII block without decoding it (about 1 s per GB from the page cache on one
    core); only a bad file is read again, line by line, to name the line."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with Path(path).open("rb") as handle:
            while block := handle.read(1 << 24):
                if not block.isascii() or decoder.getstate()[0]:
                    decoder.decode(block)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        for _ in text_lines(path):
            pass
        raise JsonlError(f"{path}: its last line ends inside a UTF-8 character") from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line of ``path``; :class:`JsonlError` names the
    first line that is not UTF-8 or not a JSON object."""
    path = Path(path)
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise JsonlError(f"{path}: line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(value, dict):
            raise JsonlError(f"{path}: line {number}: expected a JSON object, got {type(value).__name__}")
        yield number, value


def read_jsonl(path: str | Path) -> list[dict]:
    """Every object of ``path`` in order."""
    return [value for _, value in iter_jsonl(path)]


def write_json(path: str | Path, data: Any, indent: int = 1, ensure_ascii: bool = True) -> Path:
    """Write the JSON ``data`` to ``path`` atomically and durably: a temporary file, flushed to disk,
    renamed into place, the folder synced. A reader (or a run after a crash) sees the old file or the
    whole new one, never a part: the project's markers, manifests and summaries are written here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with staging.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return path


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write ``rows`` to ``path`` atomically (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with staging.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    os.replace(staging, path)
    return path


class JsonlAppender:
    """An open JSON-lines file that every :meth:`append` extends by one flushed line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._handle = self.path.open("a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        self._handle.write(json.dumps(row) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
