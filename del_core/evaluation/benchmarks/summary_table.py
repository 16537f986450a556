"""The console table of a summary (the summary JSON and per-question rows: del_core.data.jsonl)."""

from __future__ import annotations


def _number(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(summary: dict) -> str:
    """Per benchmark: n, accuracy (%), unanswered, numeric n, MAE, log-MAE; then mACC and the
    pooled per-place digit accuracy."""
    lines = [f"{'benchmark':<18}{'n':>6}{'acc %':>8}{'unans.':>8}{'num n':>7}{'MAE':>12}{'log-MAE':>9}"]
    for name, b in summary["benchmarks"].items():
        numeric = b["numeric"]
        lines.append(
            f"{name:<18}{b['n']:>6}{100 * b['accuracy']:>8.1f}{b['unanswered']:>8}{numeric['n']:>7}"
            f"{_number(numeric['mae'], 3):>12}{_number(numeric['log_mae']):>9}"
        )
    if summary["mACC"] is not None:
        lines.append(f"{'mACC':<18}{'':>6}{100 * summary['mACC']:>8.1f}")
    digits = summary["numeric"].get("digit_acc") or {}
    if digits:
        lines.append(
            "digit accuracy by place (all numeric rows): "
            + "  ".join(f"{place} {100 * acc:.1f}" for place, acc in digits.items())
        )
    return "\n".join(lines)
