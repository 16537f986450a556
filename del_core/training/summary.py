"""The console summary of a finished run: the held-out table before/after and a few answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from del_core.training.heldout import HeldOutResult

_COLUMNS = ("ce", "digit_acc", "digit_entropy", "number_acc", "answer_acc")


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "(empty)"


def print_summary(
    before: Optional[HeldOutResult],
    after: Optional[HeldOutResult],
    rows: Sequence[dict],
    log: Callable[[str], None],
    shown: int = 3,
) -> None:
    """The held-out table and up to ``shown`` greedy answers (the last line of each)."""
    if after is None:
        return
    columns = [c for c in _COLUMNS if getattr(after.record, c) is not None]
    log(f"\nHeld-out ({len(rows)} rows; answer_acc on {len(after.answers)} greedy answers):")
    log("  " + f"{'':>8}" + "".join(f"{c:>15}" for c in columns))
    for label, result in (("before", before), ("after", after)):
        if result is not None:
            log("  " + f"{label:>8}" + "".join(f"{getattr(result.record, c) or 0.0:15.4f}" for c in columns))
    for i, row in enumerate(rows[: min(shown, len(after.answers))]):
        log(f"\n  Q: {row['instruction']}\n  reference: {row['output'].splitlines()[-1]}")
        if before is not None and before.answers:
            log(f"  before:    {_last_line(before.answers[i])}")
        log(f"  after:     {_last_line(after.answers[i])}")
