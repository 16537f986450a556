"""The study's report: results.json, results.md (table + verdict computed from the numbers) and
results.png (matplotlib, Agg). Input: the dict of
:func:`del_core.experiments.study.metrics.collect_results`.

Verdicts never come from fixed text: every loss is compared with MLE seed by seed (paired), and
called better or worse only when the 95% interval of the difference over seeds excludes 0
(:mod:`del_core.experiments.comparison`); otherwise "no difference".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from del_core.experiments.report_parts import bar_panel, figure, interval_text, markdown_table, plus_minus, save_figure

# (key, column title, scale, digits, higher is better)
COLUMNS = (
    ("tf_answer_acc", "TF answer acc. %", 100, 1, True),
    ("exact_acc", "greedy exact acc. %", 100, 1, True),
    ("mae", "MAE", 1, 2, False),
    ("log_mae", "log-MAE", 1, 3, False),
    ("answered", "answered %", 100, 0, True),
    ("tf_number_acc", "TF number acc. %", 100, 1, True),
    ("tf_digit_entropy", "digit entropy (nats)", 1, 3, None),
    ("tf_ce", "held-out CE", 1, 3, False),
)
BENCH_COLUMNS = (("bench_macc", "bench mACC %", 100, 1, True), ("bench_log_mae", "bench log-MAE", 1, 3, False))
PAPER_ENTROPY_ORDER = ("ntl_was", "del", "dist2")  # the paper: NTL over-sharpens, DIST2 over-flattens


def _cell(stats, scale: float, digits: int) -> str:
    """ "m ± s" of an aggregate dict (or a bare number for the reference); "-" when missing."""
    if isinstance(stats, dict):
        return "-" if stats.get("mean") is None else plus_minus(stats["mean"], stats.get("std"), scale, digits)
    return "-" if stats is None else plus_minus(stats, None, scale, digits)


def bench_columns(results: dict) -> tuple:
    """The benchmark columns present in the results: per-benchmark accuracy, then mACC, log-MAE."""
    keys = set(results.get("reference", {})) | {k for per in results["losses"].values() for k in per}
    names = sorted(
        k[: -len("_acc")]
        for k in keys
        if k.endswith("_acc") and k not in ("exact_acc", "tf_answer_acc", "tf_number_acc", "tf_digit_acc", "bench_macc")
    )
    per = tuple((f"{n}_acc", f"{n.upper()} acc. %", 100, 1, True) for n in names)
    return per + BENCH_COLUMNS if names else ()


METRIC_LABELS = {
    "tf_answer_acc": ("teacher-forced answer accuracy", " points", 100, 1),
    "exact_acc": ("greedy exact-answer accuracy", " points", 100, 1),
    "log_mae": ("greedy log-MAE, lower is better", "", 1, 3),
}
VERDICT_WORDS = {"better": "better than MLE", "worse": "worse than MLE", "no difference": "no difference from MLE"}


def _interval_text(interval: dict, scale: float, digits: int) -> str:
    """ "+1.2 [-0.3, +2.7]" of a difference and its 95% interval ("+1.2 (one value)" without one)."""
    return interval_text(interval["mean"], interval["half_width"], scale, digits)


def comparison_line(comparison: dict) -> str:
    """One computed conclusion: the loss vs the baseline on one metric, with both intervals."""
    label, unit, scale, digits = METRIC_LABELS[comparison["metric"]]
    seeds = comparison["over_seeds"]
    text = (
        f"{comparison['loss']} vs {comparison['baseline']} ({label}): "
        f"{_interval_text(seeds, scale, digits)}{unit}, 95% CI over {seeds['n']} seeds"
    )
    problems = comparison.get("over_problems")
    if problems is not None and problems["half_width"] is not None:
        text += f"; over {problems['n']} problems ±{scale * problems['half_width']:.{digits}f}"
    return f"{text}: {VERDICT_WORDS[comparison['verdict']]}."


def _ranking(results: dict, key: str = "tf_answer_acc") -> Optional[str]:
    means = {loss: per.get(key, {}).get("mean") for loss, per in results["losses"].items()}
    ranked = sorted(((mean, loss) for loss, mean in means.items() if mean is not None), reverse=True)
    if not ranked:
        return None
    return f"Ranking by mean {METRIC_LABELS[key][0]}: " + ", ".join(f"{loss} {100 * v:.1f}" for v, loss in ranked) + "."


def _entropy_line(results: dict) -> Optional[str]:
    entropy = {
        loss: per["tf_digit_entropy"]["mean"]
        for loss, per in results["losses"].items()
        if per.get("tf_digit_entropy", {}).get("mean") is not None
    }
    if not entropy:
        return None
    ordered = sorted(entropy, key=entropy.get)
    text = "Digit entropy (nats, teacher-forced, held-out), lowest first: " + ", ".join(
        f"{loss} {entropy[loss]:.3f}" for loss in ordered
    )
    reference = results.get("reference", {}).get("tf_digit_entropy")
    if reference is not None:
        text += f"; pretrained {reference:.3f}"
    if all(loss in entropy for loss in PAPER_ENTROPY_ORDER):
        holds = entropy["ntl_was"] < entropy["del"] < entropy["dist2"]
        text += (
            ". The paper's ordering NTL-WAS < DEL < DIST2 (NTL over-sharpens, DIST2 over-flattens, DEL in "
            f"between) {'holds' if holds else 'does not hold'} here"
        )
    return text + "."


def verdicts(results: dict) -> list[str]:
    """The computed conclusions: every loss vs MLE on each compared metric (paired 95% intervals,
    :mod:`del_core.experiments.comparison`), the ranking by the primary metric, and the digit-entropy
    ordering against the paper's."""
    lines = [comparison_line(c) for c in results.get("comparisons", [])]
    if not lines:
        lines.append("No comparison with MLE: MLE and another loss need finished runs with a common seed.")
    return lines + [line for line in (_ranking(results), _entropy_line(results)) if line]


def comparison_table(results: dict) -> list[str]:
    """Markdown rows: per loss, the paired difference with MLE on each compared metric (95% CI over
    seeds, and the half-width over problems where there is one) and its verdict."""
    by_loss: dict[str, dict[str, dict]] = {}
    for comparison in results.get("comparisons", []):
        by_loss.setdefault(comparison["loss"], {})[comparison["metric"]] = comparison
    if not by_loss:
        return []
    metrics = list(METRIC_LABELS)
    rows = []
    for loss, per in by_loss.items():
        cells = []
        for metric in metrics:
            found = per.get(metric)
            if found is None:
                cells.append("-")
                continue
            _, _, scale, digits = METRIC_LABELS[metric]
            cell = _interval_text(found["over_seeds"], scale, digits)
            problems = found.get("over_problems")
            if problems is not None and problems["half_width"] is not None:
                cell += f" (problems ±{scale * problems['half_width']:.{digits}f})"
            cells.append(f"{cell}: {found['verdict']}")
        rows.append([loss, *cells])
    return markdown_table(["loss", *(f"{METRIC_LABELS[m][0]} vs MLE" for m in metrics)], rows)


def markdown(results: dict) -> str:
    """results.md: the table (mean ± std over seeds; the pretrained model as the reference row),
    the verdicts, and what each column means."""
    columns = COLUMNS + bench_columns(results)
    seeds = results.get("seeds", [])
    out = [
        f"# Study: {results.get('model')} fine-tuned with each loss",
        "",
        f"Mean ± sample standard deviation over seeds {seeds} (n per cell: see results.json).",
        "",
    ]
    reference = results.get("reference", {})
    rows = [["pretrained (reference)", "-", *(_cell(reference.get(key), s, d) for key, _, s, d, _ in columns), "-"]]
    for loss, per in results["losses"].items():
        n = max((s["n"] for s in per.values()), default=0)
        cells = [_cell(per.get(key), scale, digits) for key, _, scale, digits, _ in columns]
        rows.append([loss, str(n), *cells, _cell(per.get("train_time_s"), 1, 0)])
    out += markdown_table(["loss", "seeds", *(title for _, title, *_ in columns), "train s"], rows)
    table = comparison_table(results)
    if table:
        out += ["", "## Each loss vs MLE (paired differences, 95% CI over seeds)", "", *table]
    out += ["", "## Verdict (computed from the numbers above)", ""] + [f"- {line}" for line in verdicts(results)]
    out += [
        "",
        "## Columns",
        "",
        "- TF answer acc. (primary): teacher-forced on the held-out split, the share of problems whose stated "
        "answer (the last number of the reference) is the full-vocabulary argmax at each of its tokens and at "
        "the token that ends it, given the reference prefix (del_core/evaluation/heldout/teacher_forced.py).",
        "- greedy exact acc.: greedy answers to the first held-out problems of the generated styles, the number "
        'after "The answer is" (else the last number) equal to the gold.',
        "- MAE, log-MAE: over answered held-out problems, mean |p - g| and mean "
        "|sign(p) ln(1+|p|) - sign(g) ln(1+|g|)| (del_core/evaluation/answers/scoring.py); "
        "answered: share with a number.",
        "- TF number acc., digit entropy, held-out CE: teacher-forced over the same rows: share of numbers with "
        "every digit right (argmax among the digits), mean entropy of the ten-digit distribution at digit "
        "positions, token cross-entropy. Reference row: the starting model, scored the same way.",
        "- vs MLE: loss minus MLE, seed by seed; [low, high] is the 95% t interval over seeds (it decides the "
        "verdict); problems ± is the half-width over held-out problems of the seed-averaged per-problem "
        "difference (test-set noise alone).",
    ]
    if results.get("config", {}).get("benchmarks"):
        out.append(
            "- benchmark columns: recipes/evaluate.py (program of thought, chain-of-thought retry) on the first "
            f"{results['config'].get('benchmark_limit', '?')} questions of each benchmark."
        )
    out += ["- train s: train.py's training-loop time (start-up, evaluation and export excluded).", ""]
    return "\n".join(out + _time_lines(results)) + "\n"


def _time_lines(results: dict) -> list[str]:
    """The study's cost: the units' own times (each unit's last run, so a resumed study still adds
    up to one whole run) and the wall time of the invocation that ran them (absent for report_only=true)."""
    lines = []
    units = results.get("unit_times_s") or {}
    if units:
        total = sum(units.values())
        lines.append(f"Time of the {len(units)} units (training + scoring, each unit's last run): {total:.0f} s.")
    if results.get("wall_time_s") is not None:
        lines.append(f"Wall time of the invocation that wrote this report: {results['wall_time_s']:.0f} s.")
    return lines


def plot_panels(results: dict) -> list[tuple[str, str, float]]:
    """The bar panels of results.png, (key, title, scale): the primary metric first, then greedy
    exact accuracy, log-MAE, digit entropy, and the benchmarks' mACC when they ran (else the
    teacher-forced number accuracy)."""
    ran_benchmarks = any((per.get("bench_macc") or {}).get("mean") is not None for per in results["losses"].values())
    last = ("bench_macc", "GSM8K/SVAMP mACC (%)", 100) if ran_benchmarks else None
    return [
        ("tf_answer_acc", "held-out answer accuracy, teacher-forced (%; primary)", 100),
        ("exact_acc", "held-out exact answers, greedy (%)", 100),
        ("log_mae", "held-out log-MAE, greedy", 1),
        ("tf_digit_entropy", "digit entropy, teacher-forced (nats)", 1),
        last or ("tf_number_acc", "held-out number accuracy, teacher-forced (%)", 100),
    ]


def plot(results: dict, path: Path) -> Path:
    """results.png: the bars of :func:`plot_panels` (mean ± std over seeds, the pretrained model
    as a dashed line), and training CE per step (mean over seeds, ± std band)."""
    losses = list(results["losses"])
    reference = results.get("reference", {})
    fig, axes = figure(2, 3, (15, 8))
    for ax, (key, title, scale) in zip(axes.flat, plot_panels(results)):
        means = [scale * (results["losses"][loss].get(key, {}).get("mean") or 0.0) for loss in losses]
        stds = [scale * (results["losses"][loss].get(key, {}).get("std") or 0.0) for loss in losses]
        line = ("pretrained", scale * reference[key]) if reference.get(key) is not None else None
        bar_panel(ax, losses, means, stds, title, line)
    ax = axes.flat[5]
    for loss, curve in results.get("curves", {}).items():
        if curve["step"]:
            mean, std = curve["mean"], curve["std"]
            ax.plot(curve["step"], mean, label=loss)
            ax.fill_between(
                curve["step"], [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.15
            )
    ax.set_title("training CE per step (mean over seeds)", fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.legend(fontsize=8)
    fig.suptitle(f"{results.get('model')}: each loss, same data, budget and seeds {results.get('seeds')}")
    return save_figure(fig, path, dpi=100)


def write_report(results: dict, root: Path) -> None:
    """ROOT/results.json (with the verdicts), results.md and results.png."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    results = {**results, "verdict": verdicts(results)}
    (root / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (root / "results.md").write_text(markdown(results))
    plot(results, root / "results.png")
