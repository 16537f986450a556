"""95% confidence intervals: a mean, and a paired difference to a baseline (Student's t).

Over seeds (the numeric benchmark, the study): runs of different losses with the same seed share
the initial weights and the batch order, so the difference of two losses is taken seed by seed
(paired) and its 95% interval is Student's t over those per-seed differences:
``mean +- t(0.975, n - 1) * sd / sqrt(n)``. The per-seed values are themselves means over the same
test problems, so the interval covers both the training noise (seeds) and the test-set noise.

Over problems (a run's held-out answers before and after training): the per-problem differences
of correct (1) or not (0) after and before, the same t interval over the problems.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

# t(0.975, df) for df = 1..30; beyond, the normal quantile is within 1.5%.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145)
_T975 += (2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048)
_T975 += (2.045, 2.042)


def t_quantile(df: int) -> float:
    """t(0.975, df), the two-sided 95% quantile of Student's t."""
    if df < 1:
        raise ValueError("a t interval needs at least two values")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Interval:
    """``mean`` with its 95% half-width over ``n`` values (half_width None for one value)."""

    mean: float
    half_width: Optional[float]
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.half_width is not None and abs(self.mean) > self.half_width


def t_interval(values: Sequence[float]) -> Interval:
    """The mean of ``values`` and its t half-width (None for fewer than two values)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n < 2:
        return Interval(mean, None, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Interval(mean, t_quantile(n - 1) * sd / math.sqrt(n), n)


def paired_difference(values: Mapping[int, float], baseline: Mapping[int, float]) -> Interval:
    """``values - baseline`` over the seeds both have, with its paired t interval."""
    seeds = sorted(set(values) & set(baseline))
    if not seeds:
        raise ValueError("no seed in common")
    return t_interval([values[s] - baseline[s] for s in seeds])


def seeds_for_half_width(half_width: float, n: int, target: float, most: int = 1000) -> Optional[int]:
    """The fewest seeds whose t half-width would be <= ``target``, for the spread that gave
    ``half_width`` over ``n`` values (sd = half_width * sqrt(n) / t(0.975, n - 1), assumed to stay);
    None when ``most`` seeds would not do. A planning figure, not a guarantee: the spread itself is
    estimated from ``n`` values."""
    if n < 2 or target <= 0:
        raise ValueError(f"need n >= 2 and target > 0, got n={n}, target={target}")
    sd = half_width * math.sqrt(n) / t_quantile(n - 1)
    return next((m for m in range(2, most + 1) if t_quantile(m - 1) * sd / math.sqrt(m) <= target), None)


def verdict(difference: Interval, higher_is_better: bool) -> str:
    """ "better" / "worse" when the 95% interval excludes 0, else "no difference"."""
    if not difference.excludes_zero:
        return "no difference"
    return "better" if (difference.mean > 0) == higher_is_better else "worse"
