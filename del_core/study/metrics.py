"""The metrics of each run and their aggregation over seeds, read back from the files a study wrote.

Metrics of a run (:func:`run_metrics`), shares in [0, 1]:
  exact_acc       share of held-out problems whose greedy answer equals the gold
                  (:mod:`del_core.evaluation.heldout`)
  mae, log_mae    over the held-out problems that got a number: mean |p - g| and mean
                  |sign(p) ln(1+|p|) - sign(g) ln(1+|g|)|
  answered        share of held-out problems whose answer holds a number
  tf_answer_acc   share of the teacher-forced held-out rows whose answer is right given the
                  reference prefix (:mod:`del_core.evaluation.forced_answers`): the primary metric
  tf_number_acc, tf_digit_acc, tf_digit_entropy, tf_ce
                  teacher-forced over the same rows: digit entropy is the mean entropy (nats) of the
                  ten-digit distribution at digit positions, CE in nats per target token
  <benchmark>_acc, bench_macc, bench_log_mae
                  ``recipes/evaluate.py`` summary (accuracy per benchmark, their mean, pooled log-MAE)
  train_time_s    train.py's training-loop time (seconds)
Per loss: mean and sample standard deviation (n - 1) over seeds (:func:`aggregate`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from del_core.config import config_to_dict
from del_core.data.jsonl import read_jsonl
from del_core.study.comparison import compare_with_baseline
from del_core.study.config import StudyConfig, StudyPaths
from del_core.study.runs import training_done
from del_core.training.records import FinalRecord, TrainRecord, read_metrics

# Teacher-forced metrics of a run and the field of its held-out summary's "teacher_forced" each comes from.
TF_METRICS = {
    "tf_answer_acc": "answer_acc",
    "tf_number_acc": "number_acc",
    "tf_digit_acc": "digit_acc",
    "tf_digit_entropy": "digit_entropy",
    "tf_ce": "ce",
}


@dataclass
class RunResult:
    """What one finished run contributes to the results."""

    metrics: dict[str, Optional[float]]  # the module docstring's metrics; None where missing
    curve: list[dict[str, Optional[float]]]  # per logged step: step, ce, loss, digit_entropy
    hits: dict[str, list[bool]]  # "tf_answer_acc" / "exact_acc" -> per held-out problem, right or not


def _read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.is_file() else None


def evaluation_metrics(unit_dir: Path) -> dict[str, Optional[float]]:
    """Held-out (teacher-forced and greedy) and benchmark metrics of a run or the reference (None
    where missing)."""
    heldout = _read_json(unit_dir / "heldout" / "summary.json") or {}
    metrics = {key: heldout.get(key) for key in ("exact_acc", "answered", "mae", "log_mae")}
    forced = heldout.get("teacher_forced") or {}
    metrics.update({key: forced.get(field) for key, field in TF_METRICS.items()})
    bench = _read_json(unit_dir / "benchmarks" / "summary.json")
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


def run_metrics(run_dir: Path) -> RunResult:
    """The metrics of one finished run (module docstring) and its training curve."""
    records = read_metrics(run_dir)
    final = next((r for r in records if isinstance(r, FinalRecord)), None)
    metrics = evaluation_metrics(run_dir)
    metrics["train_time_s"] = final.train_time_s if final else None
    curve = [
        {"step": r.step, "ce": r.ce, "loss": r.loss, "digit_entropy": r.digit_entropy}
        for r in records
        if isinstance(r, TrainRecord)
    ]
    return RunResult(metrics, curve, problem_hits(run_dir))


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


def finished_runs(config: StudyConfig, paths: StudyPaths) -> dict[str, dict[int, RunResult]]:
    """loss -> seed -> result, for the runs whose training finished (losses without one are absent)."""
    runs: dict[str, dict[int, RunResult]] = {}
    for loss in config.losses:
        for seed in config.seeds:
            if training_done(paths.run_dir(loss, seed)):
                runs.setdefault(loss, {})[seed] = run_metrics(paths.run_dir(loss, seed))
    return runs


def collect_results(config: StudyConfig, root: Path) -> dict[str, Any]:
    """Everything the report needs (:mod:`del_core.study.report`), from the files under ROOT: per
    loss the aggregated metrics over the seeds that finished, the paired comparisons with MLE
    (:mod:`del_core.study.comparison`), the mean training curves, each run's metrics, and the
    reference row (the pretrained model, scored like the runs)."""
    runs = finished_runs(config, StudyPaths(Path(root)))
    names = sorted({k for per in runs.values() for r in per.values() for k in r.metrics})
    losses = {
        loss: {name: aggregate([r.metrics.get(name) for r in per.values()]) for name in names}
        for loss, per in runs.items()
    }
    reference = evaluation_metrics(StudyPaths(Path(root)).pretrained)
    return {
        "model": config.model,
        "losses": losses,
        "curves": {loss: mean_curve([r.curve for r in per.values()]) for loss, per in runs.items()},
        "reference": reference,
        "comparisons": [c.to_json() for c in compare_with_baseline(runs)],
        "runs": {loss: {str(seed): r.metrics for seed, r in per.items()} for loss, per in runs.items()},
        "seeds": list(config.seeds),
        "config": config_to_dict(config),
    }
