"""Time a command and record it as a measured figure of docs/figures.yaml, the one place the
README and the documentation take their times from (docs/development.md, "Measured figures").

    python tests/bench/measure_figure.py make_train_time -- make train
    python tests/bench/measure_figure.py make_test_time --note "clean clone, .ci/run as root" -- make test

Runs the command once from the repository root (its output passes through), and when it succeeds
writes the figure's ``value`` (the wall time: "45 s", "6 min 13 s", "1 h 19 min") and ``measured``
(the command, the CPU cores, the date, the commit and ``--note``). The figure's ``stated`` patterns,
the other figures and the file's comments are kept; a new name is added at the end, without
``stated`` patterns, which tests/docs/test_figures.py then asks for. A failed command records
nothing and exits with its status. The docs pages show the new value at the next build; the README
states figures as text, and the same test names each README statement left to update.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIGURES = REPO / "docs" / "figures.yaml"
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def duration_text(seconds: float) -> str:
    """A wall time as the pages write one: "45 s", "6 min 13 s", "1 h 19 min" (seconds dropped from an hour on)."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _entry_span(text: str, name: str) -> tuple[int, int] | None:
    """Where the entry ``name:`` (its key line and its indented or blank lines) lies in ``text``."""
    found = re.search(rf"^{re.escape(name)}:[ \t]*\n(?:(?:[ \t]+[^\n]*)?\n)*", text, re.MULTILINE)
    if found is None:
        return None
    end = found.end()
    while text[:end].endswith("\n\n"):  # the blank lines before the next entry stay outside
        end -= 1
    return found.start(), end


def write_figure(path: Path, name: str, value: str, measured: str) -> None:
    """Set figure ``name``'s value and measured in the figures file ``path``, keeping the rest."""
    if not NAME.match(name):
        raise ValueError(f"figure name {name!r}: lower-case letters, digits and _, starting with a letter")
    text = path.read_text()
    # JSON strings are YAML double-quoted scalars: any text reads back as the same string.
    value_text, measured_text = (json.dumps(string, ensure_ascii=False) for string in (value, measured))
    entry = f"{name}:\n  value: {value_text}\n  measured: {measured_text}\n"
    span = _entry_span(text, name)
    if span is None:
        path.write_text(text.rstrip("\n") + "\n\n" + entry)
        return
    start, end = span
    stated = re.search(r"^  stated:[ \t]*\n(?:    [^\n]*\n)*", text[start:end], re.MULTILINE)
    path.write_text(text[:start] + entry + (stated.group(0) if stated else "") + text[end:])


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the figure's name in docs/figures.yaml, e.g. make_train_time")
    parser.add_argument("--note", default="", help="what else a reader needs: caches warm, machine shared, ...")
    parser.usage = "measure_figure.py NAME [--note TEXT] -- COMMAND [ARG ...]"
    cut = argv.index("--") if "--" in argv else len(argv)
    options, command = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if not command or not NAME.match(options.name):
        parser.error("give the figure's name (lower-case, digits, _) and the command after --")
    started = time.monotonic()
    status = subprocess.run(command, cwd=REPO).returncode
    seconds = time.monotonic() - started
    if status != 0:
        print(f"error: `{' '.join(command)}` exited {status}: nothing recorded", file=sys.stderr)
        return status
    value = duration_text(seconds)
    measured = (
        f"`{' '.join(command)}` on {os.cpu_count()} CPU cores, {datetime.date.today().isoformat()}, "
        f"commit {_commit()}" + (f"; {options.note}" if options.note else "")
    )
    write_figure(FIGURES, options.name, value, measured)
    print(f"[figure] {options.name} = {value} ({seconds:.1f} s) -> {FIGURES.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
