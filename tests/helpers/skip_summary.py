"""The end-of-run note on the tests skipped for missing system packages: which groups (the sandbox,
the container image, the Slurm cluster), how many tests each, why, and the command that installs
what they need. ``tests/conftest.py`` prints it once, after pytest's own summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

ENABLE_COMMAND = "make system-deps"  # as root: apt-get installs the Makefile's SYSTEM_PACKAGES


@dataclass(frozen=True)
class SkipGroup:
    """A group of tests that run a real component: ``marker`` or a ``reason_words`` phrase in the
    skip reason puts a skipped test in it."""

    name: str
    needs: str
    marker: Optional[str] = None
    reason_words: tuple = ()


GROUPS = (
    SkipGroup("sandbox", "bubblewrap", reason_words=("bubblewrap", "bwrap")),
    SkipGroup("container", "podman, debootstrap, runc, catatonit", marker="container"),
    SkipGroup("slurm", "slurm-wlm, slurmctld, slurmd, slurm-client, munge", "slurm", ("slurm", "scontrol")),
)


@dataclass
class GroupSkips:
    """The skipped tests of one group: their count and their distinct reasons, in first-seen order."""

    group: SkipGroup
    count: int = 0
    reasons: list = field(default_factory=list)


def skip_reason(longrepr) -> str:
    """The reason of a skipped test's report (``longrepr`` is ``(path, line, "Skipped: reason")``)."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def group_of(markers: Iterable[str], reason: str) -> Optional[SkipGroup]:
    """The group a skipped test belongs to, by its markers first, then by its reason; None: none."""
    names = set(markers)
    for group in GROUPS:
        if group.marker is not None and group.marker in names:
            return group
    lowered = reason.lower()
    for group in GROUPS:
        if any(word in lowered for word in group.reason_words):
            return group
    return None


def collect(skipped: Iterable[tuple]) -> list[GroupSkips]:
    """``(markers, reason)`` of each skipped test -> the groups that have skips, in GROUPS order."""
    found = {group.name: GroupSkips(group) for group in GROUPS}
    for markers, reason in skipped:
        group = group_of(markers, reason)
        if group is None:
            continue
        entry = found[group.name]
        entry.count += 1
        if reason not in entry.reasons:
            entry.reasons.append(reason)
    return [entry for entry in found.values() if entry.count]


def summary_lines(groups: list[GroupSkips], max_reasons: int = 2) -> list[str]:
    """The note's lines; empty when no group had a skip."""
    if not groups:
        return []
    lines = []
    for entry in groups:
        lines.append(f"{entry.group.name} ({entry.group.needs}): {entry.count} skipped")
        lines.extend(f"    {reason}" for reason in entry.reasons[:max_reasons])
        if len(entry.reasons) > max_reasons:
            lines.append(f"    ... and {len(entry.reasons) - max_reasons} more reasons")
    lines.append(f"To run them, install the packages (as root, apt-get): {ENABLE_COMMAND}")
    return lines


def write_summary(terminalreporter) -> None:
    """pytest_terminal_summary's body: the note under its own separator, once, when a group skipped."""
    reports = terminalreporter.stats.get("skipped", [])
    skipped = [(report.keywords, skip_reason(report.longrepr)) for report in reports]
    lines = summary_lines(collect(skipped))
    if not lines:
        return
    terminalreporter.write_sep("=", "skipped for missing system packages")
    for line in lines:
        terminalreporter.write_line(line)
