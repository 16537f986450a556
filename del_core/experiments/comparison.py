"""Every loss against the baseline (MLE), paired, with 95% intervals (:mod:`del_core.confidence`).

Two intervals per (loss, metric), both of ``loss - baseline``:
  over seeds     the per-seed differences of the units' values (units with the same seed share
                 the initial weights, the training batches and the evaluation problems), Student's
                 t with n_seeds - 1 degrees of freedom. It covers training noise and test-set noise;
                 it decides the verdict.
  over problems  per evaluation problem, the mean over the common seeds of (right with the loss) -
                 (right with the baseline), Student's t over the problems. It shows the test-set
                 noise alone, for metrics with per-problem results only.

The verdict is "better" / "worse" when the over-seeds interval excludes 0, else "no difference"
(always for one seed: no interval).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional, TypeVar

from del_core.confidence import Interval, paired_difference, t_interval, verdict

Result = TypeVar("Result")
Hits = Optional[Sequence[bool]]


@dataclass(frozen=True)
class Comparison:
    """``loss - baseline`` on ``metric`` (shares in [0, 1] for accuracies)."""

    loss: str
    baseline: str
    metric: str
    higher_is_better: bool
    over_seeds: Interval
    over_problems: Optional[Interval]
    verdict: str  # better | worse | no difference (over seeds)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def over_problems(hits: Mapping[int, Hits], base_hits: Mapping[int, Hits]) -> Optional[Interval]:
    """Per-problem differences (seed -> right or not per problem) averaged over the common seeds,
    with their t interval; None when a seed lacks per-problem results or the seeds scored
    different numbers of problems."""
    seeds = sorted(set(hits) & set(base_hits))
    pairs = [(hits[s], base_hits[s]) for s in seeds]
    if not pairs or any(a is None or b is None for a, b in pairs):
        return None
    problems = len(pairs[0][0])
    if problems == 0 or any(len(a) != problems or len(b) != problems for a, b in pairs):
        return None
    means = [sum(int(a[i]) - int(b[i]) for a, b in pairs) / len(pairs) for i in range(problems)]
    return t_interval(means)


def compare(
    loss: str,
    baseline: str,
    metric: str,
    higher: bool,
    values: Mapping[int, Optional[float]],
    base_values: Mapping[int, Optional[float]],
    hits: Optional[Mapping[int, Hits]] = None,
    base_hits: Optional[Mapping[int, Hits]] = None,
) -> Optional[Comparison]:
    """``loss - baseline`` from seed -> value maps (None values left out) and, when given, seed ->
    per-problem hits; None when no common seed has a value."""
    kept = {s: v for s, v in values.items() if v is not None}
    base = {s: v for s, v in base_values.items() if v is not None}
    if not set(kept) & set(base):
        return None
    seeds = paired_difference(kept, base)
    problems = over_problems(hits, base_hits) if hits is not None and base_hits is not None else None
    return Comparison(loss, baseline, metric, higher, seeds, problems, verdict(seeds, higher))


def compare_with_baseline(
    runs: Mapping[str, Mapping[int, Result]],
    metrics: Sequence[tuple[str, bool]],
    value: Callable[[Result, str], Optional[float]],
    hits: Callable[[Result, str], Hits] = lambda result, metric: None,
    baseline: str = "mle",
) -> list[Comparison]:
    """Every loss of ``runs`` (loss -> seed -> result) but the baseline on each (metric, higher is
    better) of ``metrics``, metric by metric; ``value`` and ``hits`` read a result. Empty without
    baseline results."""
    if baseline not in runs:
        return []
    base = runs[baseline]
    found = []
    for metric, higher in metrics:
        for loss, per in runs.items():
            if loss == baseline:
                continue
            comparison = compare(
                loss,
                baseline,
                metric,
                higher,
                {s: value(r, metric) for s, r in per.items()},
                {s: value(r, metric) for s, r in base.items()},
                {s: hits(r, metric) for s, r in per.items()},
                {s: hits(r, metric) for s, r in base.items()},
            )
            if comparison is not None:
                found.append(comparison)
    return found
