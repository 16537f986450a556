"""The parts every experiment's report is made of: cell formatters, markdown tables, and the figure.

    plus_minus(0.5, 0.02, 100, 1)         "50.0 ± 2.0"   (a mean and its spread, scaled)
    interval_text(0.21, 0.03, 100, 1)     "+21.0 [+18.0, +24.0]"   (a difference and its 95% interval)
    markdown_table(["loss", "acc"], [["mle", "50.0"]])

Figures are drawn with matplotlib's Agg back end (no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional


def plus_minus(mean: float, spread: Optional[float], scale: float, digits: int, signed: bool = False) -> str:
    """``scale * mean`` with ``digits`` decimals (a sign when ``signed``), then " ± " and the scaled
    ``spread`` (a standard deviation or a half-width) when there is one."""
    text = f"{scale * mean:+.{digits}f}" if signed else f"{scale * mean:.{digits}f}"
    return text + (f" ± {scale * spread:.{digits}f}" if spread is not None else "")


def interval_text(mean: float, half_width: Optional[float], scale: float, digits: int) -> str:
    """A signed difference and its 95% interval, "+1.2 [-0.3, +2.7]"; "+1.2 (one value)" without one."""
    mean = scale * mean
    if half_width is None:
        return f"{mean:+.{digits}f} (one value)"
    half = scale * half_width
    return f"{mean:+.{digits}f} [{mean - half:+.{digits}f}, {mean + half:+.{digits}f}]"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a markdown table: the header, the separator, one line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def figure(rows: int, columns: int, size: tuple[float, float]) -> tuple[Any, Any]:
    """A matplotlib figure (Agg) and its ``rows`` x ``columns`` axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=size)


def bar_panel(
    ax: Any,
    labels: Sequence[str],
    means: Sequence[float],
    errors: Sequence[float],
    title: str,
    reference: Optional[tuple[str, float]] = None,
) -> None:
    """Bars of ``means`` with ``errors`` (a std or a half-width) per label, and a dashed line at the
    (name, value) of ``reference`` when given."""
    ax.bar(list(labels), list(means), yerr=list(errors), capsize=4, color="tab:blue", alpha=0.8)
    if reference is not None:
        ax.axhline(reference[1], color="gray", linestyle="--", label=reference[0])
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="x", labelrotation=30)


def save_figure(fig: Any, path: Path, dpi: int = 100) -> Path:
    """Lay out, write ``fig`` as a PNG to ``path`` and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
