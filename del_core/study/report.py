"""The study's report: results.json, results.md (table + verdict computed from the numbers) and
results.png (matplotlib, Agg). Input: the dict of
:func:`del_core.study.metrics.collect_results`.

Verdicts never come from fixed text: DEL vs MLE is called a win (or a loss) only when the difference
of the means exceeds two standard errors of that difference, sqrt(s1^2/n1 + s2^2/n2), which needs at
least two seeds per loss; otherwise the table says there is no clear difference at this scale.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

# (key, column title, scale, digits, higher is better)
COLUMNS = (
    ("exact_acc", "exact-number acc. %", 100, 1, True),
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
        if stats.get("mean") is None:
            return "-"
        text = f"{scale * stats['mean']:.{digits}f}"
        return text + (f" ± {scale * stats['std']:.{digits}f}" if stats.get("std") is not None else "")
    return "-" if stats is None else f"{scale * stats:.{digits}f}"


def bench_columns(results: dict) -> tuple:
    """The benchmark columns present in the results: per-benchmark accuracy, then mACC, log-MAE."""
    keys = set(results.get("reference", {})) | {k for per in results["losses"].values() for k in per}
    names = sorted(
        k[: -len("_acc")]
        for k in keys
        if k.endswith("_acc") and k not in ("exact_acc", "tf_number_acc", "tf_digit_acc", "bench_macc")
    )
    per = tuple((f"{n}_acc", f"{n.upper()} acc. %", 100, 1, True) for n in names)
    return per + BENCH_COLUMNS if names else ()


def compare(
    results: dict, key: str, a: str, b: str, scale: float = 100.0, higher_is_better: bool = True
) -> Optional[dict]:
    """Loss ``a`` vs loss ``b`` on ``key``: diff (a - b, scaled), its standard error, and a verdict
    word: better, worse or unclear (|diff| <= 2 SE, or fewer than two seeds). None when missing."""
    sa, sb = results["losses"].get(a, {}).get(key), results["losses"].get(b, {}).get(key)
    if not sa or not sb or sa["mean"] is None or sb["mean"] is None:
        return None
    diff = scale * (sa["mean"] - sb["mean"])
    se = None
    if sa["std"] is not None and sb["std"] is not None:
        se = scale * math.sqrt(sa["std"] ** 2 / sa["n"] + sb["std"] ** 2 / sb["n"])
    if se is None or abs(diff) <= 2 * se:
        word = "unclear"
    else:
        word = "better" if (diff > 0) == higher_is_better else "worse"
    return {"diff": diff, "se": se, "verdict": word, "a": sa, "b": sb}


def _compare_line(results: dict, key: str, label: str, unit: str, scale: float, higher: bool, digits: int) -> str:
    found = compare(results, key, "del", "mle", scale, higher)
    if found is None:
        return f"DEL vs MLE ({label}): not available (both losses need finished runs with this metric)."
    seeds = f"{found['a']['n']} vs {found['b']['n']} seeds"
    se = f", standard error {found['se']:.{digits}f}" if found["se"] is not None else ", no standard error (one seed)"
    conclusion = {
        "better": "DEL is better than MLE here",
        "worse": "DEL is worse than MLE here",
        "unclear": "no clear difference at this scale (|difference| <= 2 standard errors)",
    }[found["verdict"]]
    return (
        f"DEL vs MLE ({label}): {found['diff']:+.{digits}f}{unit} (DEL {_cell(found['a'], scale, digits)}, "
        f"MLE {_cell(found['b'], scale, digits)}; {seeds}{se}): {conclusion}."
    )


def verdicts(results: dict) -> list[str]:
    """The computed conclusions: DEL vs MLE on exact-number accuracy, log-MAE and the benchmarks,
    the best loss by exact-number accuracy, and the digit-entropy ordering against the paper's."""
    lines = [
        _compare_line(results, "exact_acc", "held-out exact-number accuracy", " points", 100, True, 1),
        _compare_line(results, "log_mae", "held-out log-MAE, lower is better", "", 1, False, 3),
    ]
    if any("bench_macc" in per for per in results["losses"].values()):
        lines.append(_compare_line(results, "bench_macc", "benchmark mACC", " points", 100, True, 1))
    ranked = sorted(
        (
            (per["exact_acc"]["mean"], loss)
            for loss, per in results["losses"].items()
            if per.get("exact_acc", {}).get("mean") is not None
        ),
        reverse=True,
    )
    if ranked:
        lines.append(
            "Ranking by mean held-out exact-number accuracy: "
            + ", ".join(f"{loss} {100 * value:.1f}" for value, loss in ranked)
            + "."
        )
    entropy = {
        loss: per["tf_digit_entropy"]["mean"]
        for loss, per in results["losses"].items()
        if per.get("tf_digit_entropy", {}).get("mean") is not None
    }
    if entropy:
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
        lines.append(text + ".")
    return lines


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
        "| loss | seeds | " + " | ".join(title for _, title, *_ in columns) + " | train s |",
        "|---|---|" + "---|" * len(columns) + "---|",
    ]
    reference = results.get("reference", {})
    out.append(
        "| pretrained (reference) | - | "
        + " | ".join(_cell(reference.get(key), scale, digits) for key, _, scale, digits, _ in columns)
        + " | - |"
    )
    for loss, per in results["losses"].items():
        n = max((s["n"] for s in per.values()), default=0)
        out.append(
            f"| {loss} | {n} | "
            + " | ".join(_cell(per.get(key), scale, digits) for key, _, scale, digits, _ in columns)
            + f" | {_cell(per.get('train_time_s'), 1, 0)} |"
        )
    out += ["", "## Verdict (computed from the numbers above)", ""] + [f"- {line}" for line in verdicts(results)]
    out += [
        "",
        "## Columns",
        "",
        "- exact-number acc.: greedy answers to held-out problems of the study's generator (steps-style unless "
        'configured), the number after "The answer is" (else the last number) equal to the gold.',
        "- MAE, log-MAE: over answered held-out problems, mean |p - g| and mean "
        "|sign(p) ln(1+|p|) - sign(g) ln(1+|g|)| (del_core/evaluation/scoring.py); answered: share with a number.",
        "- TF number acc., digit entropy, held-out CE: teacher-forced on the held-out split after training "
        "(train.py's eval record labelled after): share of numbers with every digit right, mean entropy of the "
        "ten-digit distribution at digit positions, token cross-entropy. Reference row: before training.",
        "- benchmark columns: recipes/evaluate.py (program of thought, chain-of-thought retry) on the first "
        f"{results.get('config', {}).get('benchmark_limit', '?')} questions of each benchmark.",
        "- train s: train.py's training-loop time (start-up, evaluation and export excluded).",
        "",
    ]
    if results.get("wall_time_s") is not None:
        out.append(f"Wall time of the invocation that wrote this report: {results['wall_time_s']:.0f} s.")
    return "\n".join(out) + "\n"


def plot(results: dict, path: Path) -> Path:
    """results.png: exact-number accuracy, log-MAE, digit entropy, benchmark mACC (bars, mean ± std,
    pretrained as a dashed line), and training CE per step (mean over seeds, ± std band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = list(results["losses"])
    reference = results.get("reference", {})
    panels = [
        ("exact_acc", "held-out exact-number accuracy (%)", 100),
        ("log_mae", "held-out log-MAE", 1),
        ("tf_digit_entropy", "digit entropy, teacher-forced (nats)", 1),
        ("bench_macc", "GSM8K/SVAMP mACC (%)", 100),
        ("tf_number_acc", "held-out number accuracy, teacher-forced (%)", 100),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (key, title, scale) in zip(axes.flat, panels):
        means = [scale * (results["losses"][loss].get(key, {}).get("mean") or 0.0) for loss in losses]
        stds = [scale * (results["losses"][loss].get(key, {}).get("std") or 0.0) for loss in losses]
        ax.bar(losses, means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
        if reference.get(key) is not None:
            ax.axhline(scale * reference[key], color="gray", linestyle="--", label="pretrained")
            ax.legend(fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelrotation=30)
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
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(results: dict, root: Path) -> None:
    """ROOT/results.json (with the verdicts), results.md and results.png."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    results = {**results, "verdict": verdicts(results)}
    (root / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (root / "results.md").write_text(markdown(results))
    plot(results, root / "results.png")
