"""The console summary of a finished run: the held-out table (before, during, after) and a few answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from del_core.training.heldout import HeldOutResult
from del_core.training.records import EvalRecord

_COLUMNS = ("ce", "digit_acc", "digit_entropy", "number_acc", "answer_acc")


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "(empty)"


def _table_row(label: str, record: EvalRecord, columns: Sequence[str]) -> str:
    """One line of the table; a metric the record lacks (no answers during training) shows "-"."""
    values = [getattr(record, c) for c in columns]
    return "  " + f"{label:>8}" + "".join(f"{v:15.4f}" if v is not None else f"{'-':>15}" for v in values)


def print_summary(
    before: Optional[HeldOutResult],
    after: Optional[HeldOutResult],
    rows: Sequence[dict],
    log: Callable[[str], None],
    during: Sequence[EvalRecord] = (),
    shown: int = 3,
) -> None:
    """The held-out table (``during``: the run.eval_every records, one row each, "step N") and up
    to ``shown`` greedy answers (the last line of each)."""
    if after is None:
        return
    columns = [c for c in _COLUMNS if getattr(after.record, c) is not None]
    log(f"\nHeld-out ({len(rows)} rows; answer_acc on {len(after.answers)} greedy answers):")
    log("  " + f"{'':>8}" + "".join(f"{c:>15}" for c in columns))
    if before is not None:
        log(_table_row("before", before.record, columns))
    for record in during:
        log(_table_row(f"step {record.step}", record, columns))
    log(_table_row("after", after.record, columns))
    for i, row in enumerate(rows[: min(shown, len(after.answers))]):
        log(f"\n  Q: {row['instruction']}\n  reference: {row['output'].splitlines()[-1]}")
        if before is not None and before.answers:
            log(f"  before:    {_last_line(before.answers[i])}")
        log(f"  after:     {_last_line(after.answers[i])}")
