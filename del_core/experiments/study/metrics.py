"""The metrics of each run and their aggregation over seeds, read back from the files a study wrote.

Metrics of a run (:func:`run_metrics`), shares in [0, 1]:
  exact_acc       share of held-out problems whose greedy answer equals the gold
                  (:mod:`del_core.evaluation.heldout.greedy_answers`)
  mae, log_mae    over the held-out problems that got a number: mean |p - g| and mean
                  |sign(p) ln(1+|p|) - sign(g) ln(1+|g|)|
  answered        share of held-out problems whose answer holds a number
  tf_answer_acc   share of the teacher-forced held-out rows whose answer is right given the reference
                  prefix (:func:`del_core.evaluation.heldout.teacher_forced.score_forced_answers`): the
                  primary metric
  tf_number_acc, tf_digit_acc, tf_digit_entropy, tf_ce
                  teacher-forced over the same rows: digit entropy is the mean entropy (nats) of the
                  ten-digit distribution at digit positions, CE in nats per target token
  <benchmark>_acc, bench_macc, bench_log_mae
                  the benchmark summary (:mod:`del_core.evaluation.benchmarks.runner`: accuracy per benchmark,
                  their mean, pooled log-MAE)
  train_time_s    the trainer's training-loop time (seconds; its final record)
Per loss: mean and sample standard deviation (n - 1) over seeds (:func:`aggregate`).

A finished run is one :class:`~del_core.experiments.results.UnitResult` whose one split,
``heldout``, holds its :class:`StudyScores`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from del_core.config import config_to_dict
from del_core.data.jsonl import read_jsonl
from del_core.experiments.comparison import Comparison, compare_with_baseline
from del_core.experiments.grid import Unit
from del_core.experiments.output_root import read_marker
from del_core.experiments.results import UnitResult
from del_core.experiments.study.config import StudyConfig, StudyPaths
from del_core.experiments.study.train_unit import training_done
from del_core.training.records import FinalRecord, TrainRecord, read_metrics

# Teacher-forced metrics of a run and the field of its held-out summary's "teacher_forced" each comes from.
TF_METRICS = {
    "tf_answer_acc": "answer_acc",
    "tf_number_acc": "number_acc",
    "tf_digit_acc": "digit_acc",
    "tf_digit_entropy": "digit_entropy",
    "tf_ce": "ce",
}


# (metric, higher is better) compared with MLE: the teacher-forced answer accuracy first (the primary metric).
COMPARED_METRICS = (("tf_answer_acc", True), ("exact_acc", True), ("log_mae", False))
SPLIT = "heldout"  # the one split of a study's unit result


@dataclass
class StudyScores:
    """The scores of one run (or of the reference) on the held-out split and the benchmarks."""

    metrics: dict[str, Optional[float]]  # the module docstring's metrics; None where missing
    hits: dict[str, list[bool]] = field(default_factory=dict)  # "tf_answer_acc" / "exact_acc" -> per problem


def comparisons(runs: Mapping[str, Mapping[int, UnitResult[StudyScores]]]) -> list[Comparison]:
    """Every loss of ``runs`` (loss -> seed -> result) against MLE on :data:`COMPARED_METRICS`
    (:func:`del_core.experiments.comparison.compare_with_baseline`, over seeds and over problems)."""
    return compare_with_baseline(runs, COMPARED_METRICS, metric_of, hits_of)


def metric_of(result: UnitResult[StudyScores], metric: str) -> Optional[float]:
    return result.evals[SPLIT].metrics.get(metric)


def hits_of(result: UnitResult[StudyScores], metric: str) -> Optional[list[bool]]:
    return result.evals[SPLIT].hits.get(metric)


def evaluation_metrics(unit_dir: Path) -> dict[str, Optional[float]]:
    """Held-out (teacher-forced and greedy) and benchmark metrics of a run or the reference (None
    where missing)."""
    heldout = read_marker(unit_dir / "heldout" / "summary.json") or {}
    metrics = {key: heldout.get(key) for key in ("exact_acc", "answered", "mae", "log_mae")}
    forced = heldout.get("teacher_forced") or {}
    metrics.update({key: forced.get(field) for key, field in TF_METRICS.items()})
    bench = read_marker(unit_dir / "benchmarks" / "summary.json")
    if bench:
        for name, stats in bench["benchmarks"].items():
            metrics[f"{name}_acc"] = stats["accuracy"]
        metrics["bench_macc"] = bench["mACC"]
        metrics["bench_log_mae"] = bench["numeric"]["log_mae"]
    return metrics


def problem_hits(unit_dir: Path) -> dict[str, list[bool]]:
    """Per held-out problem, right or not: ``tf_answer_acc`` (teacher_forced.jsonl) and ``exact_acc``
    (predictions.jsonl); a file not written yet gives no entry."""
    hits = {}
    for key, name in (("tf_answer_acc", "teacher_forced.jsonl"), ("exact_acc", "predictions.jsonl")):
        path = unit_dir / "heldout" / name
        if path.is_file():
            hits[key] = [bool(row["correct"]) for row in read_jsonl(path)]
    return hits


def run_metrics(run_dir: Path, unit: Unit) -> UnitResult[StudyScores]:
    """The metrics of one finished run (module docstring) of ``unit``, its training curve and its
    training time (``wall_s``)."""
    records = read_metrics(run_dir)
    final = next((r for r in records if isinstance(r, FinalRecord)), None)
    metrics = evaluation_metrics(run_dir)
    metrics["train_time_s"] = final.train_time_s if final else None
    curve = [
        {"step": r.step, "ce": r.ce, "loss": r.loss, "digit_entropy": r.digit_entropy}
        for r in records
        if isinstance(r, TrainRecord)
    ]
    return UnitResult(unit, {SPLIT: StudyScores(metrics, problem_hits(run_dir))}, curve, metrics["train_time_s"])


def aggregate(values: Sequence[Optional[float]]) -> dict[str, Any]:
    """{"mean", "std", "n", "values"} of the finite numbers in ``values`` (None and NaN are left
    out); std is the sample standard deviation (n - 1), None for fewer than two values; mean is None
    for none."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(kept)
    mean = sum(kept) / n if n else None
    std = math.sqrt(sum((v - mean) ** 2 for v in kept) / (n - 1)) if n >= 2 else None
    return {"mean": mean, "std": std, "n": n, "values": kept}


def mean_curve(curves: Sequence[Sequence[Mapping[str, Any]]], key: str = "ce") -> dict[str, list]:
    """Per step, the mean and std over seeds of ``key`` ({"step", "mean", "std"} lists; steps
    present in every curve; std 0.0 for one seed)."""
    if not curves:
        return {"step": [], "mean": [], "std": []}
    steps = sorted(set.intersection(*({r["step"] for r in c} for c in curves)))
    by_step = [{r["step"]: r[key] for r in c} for c in curves]
    stats = [aggregate([c[s] for c in by_step]) for s in steps]
    return {"step": steps, "mean": [s["mean"] for s in stats], "std": [s["std"] or 0.0 for s in stats]}


def finished_runs(config: StudyConfig, paths: StudyPaths) -> dict[str, dict[int, UnitResult[StudyScores]]]:
    """loss -> seed -> result, for the runs whose training finished (losses without one are absent)."""
    runs: dict[str, dict[int, UnitResult[StudyScores]]] = {}
    for loss in config.losses:
        for seed in config.seeds:
            if training_done(paths.run_dir(loss, seed)):
                unit = Unit(loss, config.loss_weights.get(loss), seed)
                runs.setdefault(loss, {})[seed] = run_metrics(paths.run_dir(loss, seed), unit)
    return runs


def collect_results(config: StudyConfig, root: Path) -> dict[str, Any]:
    """Everything the report needs (:mod:`del_core.experiments.study.report`), from the files under ROOT: per
    loss the aggregated metrics over the seeds that finished, the paired comparisons with MLE
    (:mod:`del_core.experiments.comparison`), the mean training curves, each run's metrics, and the
    reference row (the pretrained model, scored like the runs)."""
    runs = finished_runs(config, StudyPaths(Path(root)))
    names = sorted({k for per in runs.values() for r in per.values() for k in r.evals[SPLIT].metrics})
    losses = {
        loss: {name: aggregate([metric_of(r, name) for r in per.values()]) for name in names}
        for loss, per in runs.items()
    }
    reference = evaluation_metrics(StudyPaths(Path(root)).pretrained)
    return {
        "model": config.model,
        "losses": losses,
        "curves": {loss: mean_curve([r.curve for r in per.values()]) for loss, per in runs.items()},
        "reference": reference,
        "comparisons": [c.to_json() for c in comparisons(runs)],
        "runs": {loss: {str(seed): r.evals[SPLIT].metrics for seed, r in per.items()} for loss, per in runs.items()},
        "seeds": list(config.seeds),
        "config": config_to_dict(config),
    }
