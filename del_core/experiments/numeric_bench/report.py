"""The benchmark's report: per loss the test scores with 95% intervals, the paired difference to
MLE with its verdict, per-place digit accuracy, per-task exact accuracy, the lambda selection, and
a plot.

Every difference is printed with its interval; the verdict is "better" / "worse" only when the
paired 95% interval excludes 0, else "no difference".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

from del_core.confidence import Interval, seeds_for_half_width, t_interval
from del_core.experiments.comparison import compare
from del_core.experiments.numeric_bench.config import NumericBenchConfig
from del_core.experiments.numeric_bench.protocol import BenchOutcome
from del_core.experiments.numeric_bench.tasks import make_split
from del_core.experiments.report_parts import bar_panel, figure, markdown_table, plus_minus, save_figure
from del_core.experiments.results import UnitResult

# (key of EvalResult, label, scale for printing, higher is better)
METRICS = (
    ("exact_acc", "exact %", 100.0, True),
    ("log_mae", "log-MAE", 1.0, False),
    ("mae", "MAE", 1.0, False),
    ("tf_digit_entropy", "digit H (nats)", 1.0, False),
)


def by_seed(results: Sequence[UnitResult], loss: str, phase: str, split: str, key: str) -> dict[int, float]:
    return {r.spec.seed: getattr(r.evals[split], key) for r in results if r.spec.loss == loss and r.spec.phase == phase}


def place_by_seed(results: Sequence[UnitResult], loss: str, split: str, place: str) -> dict[int, float]:
    runs = [r for r in results if r.spec.loss == loss and r.spec.phase == "test"]
    return {r.spec.seed: r.evals[split].place_acc[place] for r in runs if place in r.evals[split].place_acc}


def summarise(config: NumericBenchConfig, results: Sequence[UnitResult]) -> dict[str, Any]:
    """loss -> split -> metric -> {"mean", "half_width", "diff", "diff_half_width", "verdict"}."""
    summary: dict[str, Any] = {}
    for loss in config.losses:
        summary[loss] = {}
        for split in ("test", "ood"):
            summary[loss][split] = {key: _cell(results, loss, split, key, higher) for key, _, _, higher in METRICS}
    summary["untrained"] = {
        split: {
            key: _interval_dict(t_interval(list(by_seed(results, "mle", "untrained", split, key).values())))
            for key, *_ in METRICS
        }
        for split in ("test", "ood")
    }
    return summary


def _interval_dict(interval: Interval) -> dict[str, Any]:
    return {"mean": interval.mean, "half_width": interval.half_width, "n": interval.n}


def _cell(results, loss: str, split: str, key: str, higher: bool) -> dict[str, Any]:
    values = by_seed(results, loss, "test", split, key)
    cell = _interval_dict(t_interval(list(values.values())))
    if loss != "mle":
        c = compare(loss, "mle", key, higher, values, by_seed(results, "mle", "test", split, key))
        diff = c.over_seeds
        cell |= {"diff": diff.mean, "diff_half_width": diff.half_width, "verdict": c.verdict}
    return cell


def results_table(config: NumericBenchConfig, summary: dict, chosen: dict[str, float], split: str) -> list[str]:
    """Markdown rows: per loss its lambda, each metric with its interval and the paired
    difference to MLE with its interval and verdict."""
    header = ["loss", "lambda", *(title for _, label, _, _ in METRICS for title in (label, "Δ vs MLE"))]
    rows = []
    for loss in ("untrained", *config.losses):
        cells = [loss, "-" if loss in ("untrained", "mle") else str(chosen.get(loss, "-"))]
        for key, _, scale, _ in METRICS:
            c = summary[loss][split][key]
            digits = 1 if scale == 100.0 else 3
            cells.append(plus_minus(c["mean"], c["half_width"], scale, digits))
            if "diff" in c:
                cells.append(f"{plus_minus(c['diff'], c['diff_half_width'], scale, digits, True)} ({c['verdict']})")
            else:
                cells.append("")
        rows.append(cells)
    return markdown_table(header, rows)


def _per_column_table(
    config: NumericBenchConfig, columns: Sequence[str], values_of: Callable[[str, str], dict[int, float]]
) -> list[str]:
    """Markdown rows: per loss the mean (%) over seeds of ``values_of(loss, column)`` (seed -> value)
    in each column, and for the other losses the paired difference to MLE in points with its interval."""
    mle = {column: values_of("mle", column) for column in columns}
    rows = []
    for loss in config.losses:
        cells = [loss]
        for column in columns:
            values = values_of(loss, column)
            cell = f"{100 * t_interval(list(values.values())).mean:.1f}" if values else "-"
            if loss != "mle" and values:
                diff = compare(loss, "mle", column, True, values, mle[column]).over_seeds
                cell += f" ({plus_minus(diff.mean, diff.half_width, 100.0, 1, True)})"
            cells.append(cell)
        rows.append(cells)
    return markdown_table(["loss", *columns], rows)


def place_table(config: NumericBenchConfig, results: Sequence[UnitResult], split: str = "test") -> list[str]:
    """Markdown rows: per loss the mean accuracy (%) at each place of the gold answers, and for the
    other losses the paired difference to MLE in points with its interval."""
    places = sorted(
        {p for r in results if r.spec.phase == "test" for p in r.evals[split].place_acc},
        key=lambda p: -int(p.split("^")[1]),
    )
    places = [p for p in places if -3 <= int(p.split("^")[1]) <= 3]
    return _per_column_table(config, places, lambda loss, place: place_by_seed(results, loss, split, place))


def task_by_seed(results: Sequence[UnitResult], loss: str, tasks: Sequence[str], task: str) -> dict[int, float]:
    """seed -> exact accuracy of ``loss``'s test run on the test problems of ``task`` (``tasks``:
    the task of each test problem, in the split's order)."""
    where = [i for i, name in enumerate(tasks) if name == task]
    runs = [r for r in results if r.spec.loss == loss and r.spec.phase == "test"]
    return {r.spec.seed: sum(r.evals["test"].correct[i] for i in where) / len(where) for r in runs if where}


def task_table(config: NumericBenchConfig, results: Sequence[UnitResult]) -> list[str]:
    """Markdown rows: per loss the exact accuracy (%) on each task's test problems, with the paired
    difference to MLE; the header gives each task's share of the test split."""
    tasks = [problem.family for problem in make_split("test", config.test_size, config.digits, 0, config.tasks)]
    columns = [task for task in config.tasks if task in tasks]
    lines = _per_column_table(config, columns, lambda loss, task: task_by_seed(results, loss, tasks, task))
    lines[0] = "| loss | " + " | ".join(f"{task} ({tasks.count(task)})" for task in columns) + " |"
    return lines


def selection_table(selected: Sequence[UnitResult]) -> list[str]:
    """Markdown rows: per tuned loss and lambda, the mean validation exact accuracy and log-MAE."""
    rows = []
    for loss, weight in sorted({(r.spec.loss, r.spec.weight) for r in selected}):
        runs = [r.evals["val"] for r in selected if (r.spec.loss, r.spec.weight) == (loss, weight)]
        acc = 100 * sum(e.exact_acc for e in runs) / len(runs)
        log_mae = sum(e.log_mae for e in runs) / len(runs)
        rows.append([loss, f"{weight:g}", f"{acc:.1f}", f"{log_mae:.3f}", str(len(runs))])
    return markdown_table(["loss", "lambda", "val exact %", "val log-MAE", "seeds"], rows)


def achieved_half_width(config: NumericBenchConfig, summary: dict) -> Optional[float]:
    """The widest 95% half-width (points) of an exact-accuracy difference to MLE on the test split."""
    widths = [summary[loss]["test"]["exact_acc"].get("diff_half_width") for loss in config.losses if loss != "mle"]
    widths = [w for w in widths if w is not None]
    return 100 * max(widths) if widths else None


def markdown(
    config: NumericBenchConfig,
    summary: dict,
    chosen: dict[str, float],
    results: Sequence[UnitResult],
    selected: Sequence[UnitResult] = (),
) -> str:
    half = achieved_half_width(config, summary)
    half_text = "n/a" if half is None else f"{half:.2f} points"
    if half is not None and half > config.target_half_width and len(config.seeds) >= 2:
        needed = seeds_for_half_width(half, len(config.seeds), config.target_half_width)
        half_text += f"; at this spread about {needed or '> 1000'} seeds would reach the target"
    lines = [
        "# Numeric-loss benchmark (from scratch)",
        "",
        f"Model: Llama-architecture, hidden {config.hidden}, {config.layers} layers, random init; {config.steps} steps "
        f"of {config.batch_size} problems ({', '.join(config.tasks)}; operands up to {config.digits} digits). "
        f"Test {config.test_size} problems, OOD ({config.digits + 1} digits) {config.ood_size}; seeds "
        f"{list(config.seeds)} (paired: same initial weights and batches for every loss). Lambdas chosen on "
        f"{config.val_size} validation problems with seeds {list(config.select_seeds)}: {json.dumps(chosen)}.",
        "",
        f"Intervals are 95% t intervals over seeds; Δ is the paired difference to MLE. Widest half-width of an "
        f"exact-accuracy difference: {half_text} (target <= {config.target_half_width:g}).",
        "",
        "## Test split",
        "",
        *results_table(config, summary, chosen, "test"),
        "",
        f"## Out of distribution ({config.digits + 1}-digit operands)",
        "",
        *results_table(config, summary, chosen, "ood"),
        "",
        "## Per-place digit accuracy, test split (%; Δ vs MLE in points)",
        "",
        *place_table(config, results),
        "",
        "## Exact accuracy per task, test split (%; Δ vs MLE in points; problems per task in brackets)",
        "",
        *task_table(config, results),
        "",
        "## Lambda selection (validation split)",
        "",
        *selection_table(selected),
        "",
    ]
    return "\n".join(lines)


def plot(config: NumericBenchConfig, summary: dict, results: Sequence[UnitResult], path: Path) -> Path:
    """Exact accuracy and log-MAE per loss with their 95% intervals, and the mean training CE."""
    losses = list(config.losses)
    fig, axes = figure(1, 3, (15, 4))
    for ax, (key, label, scale, _) in zip(axes[:2], METRICS[:2]):
        cells = [summary[loss]["test"][key] for loss in losses]
        means = [scale * c["mean"] for c in cells]
        bar_panel(
            ax, losses, means, [scale * (c["half_width"] or 0) for c in cells], f"test {label} (95% CI over seeds)"
        )
    for loss in losses:
        curves = [r.curve for r in results if r.spec.loss == loss and r.spec.phase == "test" and r.curve]
        if curves:
            steps = [p["step"] for p in curves[0]]
            axes[2].plot(steps, [sum(c[i]["ce"] for c in curves) / len(curves) for i in range(len(steps))], label=loss)
    axes[2].set_title("training CE (mean over seeds)", fontsize=10)
    axes[2].set_xlabel("step")
    axes[2].legend()
    return save_figure(fig, path, dpi=110)


def write_report(outcome: BenchOutcome) -> Path:
    """OUTPUT_ROOT/report.md, summary.json and report.png; returns the markdown's path."""
    config, chosen, results = outcome.config, outcome.chosen, outcome.results
    root = Path(config.output_root)
    summary = summarise(config, results)
    (root / "summary.json").write_text(json.dumps({"chosen": chosen, "summary": summary}, indent=1))
    path = root / "report.md"
    path.write_text(markdown(config, summary, chosen, results, outcome.selected))
    plot(config, summary, results, root / "report.png")
    return path
