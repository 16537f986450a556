"""Every loss against the baseline (MLE), paired, with 95% intervals (:mod:`del_core.evaluation.confidence`).

Two intervals per (loss, metric), both of ``loss - baseline``:
  over seeds     the per-seed differences of the run means (runs with the same seed share the
                 training batches and the held-out rows), Student's t with n_seeds - 1 degrees of
                 freedom. It covers training noise and test-set noise; it decides the verdict.
  over problems  per held-out problem, the mean over the common seeds of (right with the loss) -
                 (right with the baseline), Student's t over the problems. It shows the test-set
                 noise alone (how precise the answer counts are), for the per-problem metrics only.

The verdict is "better" / "worse" when the over-seeds interval excludes 0, else "no difference".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Optional

from del_core.evaluation.confidence import Interval, paired_difference, t_interval, verdict

# (metric, higher is better): the teacher-forced answer accuracy first (the study's primary metric).
COMPARED_METRICS = (("tf_answer_acc", True), ("exact_acc", True), ("log_mae", False))


@dataclass(frozen=True)
class Comparison:
    """``loss - baseline`` on ``metric`` (shares in [0, 1] for accuracies)."""

    loss: str
    baseline: str
    metric: str
    higher_is_better: bool
    over_seeds: Interval
    over_problems: Optional[Interval]
    verdict: str  # better | worse | no difference (over seeds; "no difference" for one seed)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _over_problems(per_loss: Mapping[int, Any], per_base: Mapping[int, Any], metric: str) -> Optional[Interval]:
    """Per-problem differences averaged over the common seeds, with their t interval; None when a
    run lacks per-problem results or the runs scored different numbers of problems."""
    seeds = sorted(set(per_loss) & set(per_base))
    pairs = [(per_loss[s].hits.get(metric), per_base[s].hits.get(metric)) for s in seeds]
    if not pairs or any(a is None or b is None for a, b in pairs):
        return None
    problems = len(pairs[0][0])
    if problems == 0 or any(len(a) != problems or len(b) != problems for a, b in pairs):
        return None
    means = [sum(int(a[i]) - int(b[i]) for a, b in pairs) / len(pairs) for i in range(problems)]
    return t_interval(means)


def compare_runs(
    per_loss: Mapping[int, Any], per_base: Mapping[int, Any], loss: str, baseline: str, metric: str, higher: bool
) -> Optional[Comparison]:
    """One :class:`Comparison` from seed -> RunResult maps (:mod:`del_core.study.metrics`); None
    when no common seed has the metric."""
    values = {s: r.metrics.get(metric) for s, r in per_loss.items() if r.metrics.get(metric) is not None}
    base = {s: r.metrics.get(metric) for s, r in per_base.items() if r.metrics.get(metric) is not None}
    if not set(values) & set(base):
        return None
    over_seeds = paired_difference(values, base)
    over_problems = _over_problems(per_loss, per_base, metric)
    return Comparison(loss, baseline, metric, higher, over_seeds, over_problems, verdict(over_seeds, higher))


def compare_with_baseline(runs: Mapping[str, Mapping[int, Any]], baseline: str = "mle") -> list[Comparison]:
    """Every loss of ``runs`` (loss -> seed -> RunResult) but the baseline, on each of
    :data:`COMPARED_METRICS`; empty without baseline runs."""
    if baseline not in runs:
        return []
    found = []
    for metric, higher in COMPARED_METRICS:
        for loss, per_loss in runs.items():
            if loss != baseline:
                comparison = compare_runs(per_loss, runs[baseline], loss, baseline, metric, higher)
                if comparison is not None:
                    found.append(comparison)
    return found
