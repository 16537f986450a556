"""The numeric benchmark's configuration (a structured config of :mod:`del_core.config`).

config = load_numeric_bench_config("recipes/configs/numeric-bench.yaml", ["seeds=[0,1]", "steps=50"])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from del_core.config import ConfigError, load_config
from del_core.experiments.numeric_bench.tasks import TASKS
from del_core.losses import LOSS_NAMES

# lambda grids of three values x4 apart, centred on what validation chose from each loss's default
# x1/4, x1, x4 (an edge value for every loss: NTL-WAS/MSE 0.075, DIST2 0.4, DEL 0.032), so that the
# grid brackets it; losses without a lambda are not tuned.
DEFAULT_GRIDS = {"ntl_was": [0.019, 0.075, 0.3], "ntl_mse": [0.019, 0.075, 0.3], "dist2": [0.1, 0.4, 1.6]}
DEFAULT_GRIDS["del"] = [0.008, 0.032, 0.128]
# The newer losses: x1/4, x1, x4 their default lambda (not yet validated here).
DEFAULT_GRIDS |= {"number_level": [0.075, 0.3, 1.2], "smmd": [0.25, 1.0, 4.0], "ntil": [0.075, 0.3, 1.2]}


@dataclass
class NumericBenchConfig:
    """Every key of a benchmark run. Sizes in problems; ``steps`` are optimizer steps."""

    output_root: str = "runs/numeric-bench"
    losses: list[str] = field(default_factory=lambda: list(LOSS_NAMES))
    grids: dict[str, list[float]] = field(default_factory=lambda: dict(DEFAULT_GRIDS))
    seeds: list[int] = field(default_factory=lambda: list(range(16)))  # test seeds (paired over losses)
    select_seeds: list[int] = field(default_factory=lambda: [100])  # seeds of the lambda selection
    tasks: list[str] = field(default_factory=lambda: list(TASKS))
    digits: int = 2  # the largest operand width in training; the OOD split has one more
    train_size: int = 40000  # distinct training problems drawn (the steps cycle through them)
    val_size: int = 1000
    test_size: int = 2000
    ood_size: int = 500
    steps: int = 1200
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 100
    log_every: int = 50
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    eval_batch_size: int = 250
    workers: int = 2  # runs in parallel processes
    threads: int = 1  # torch threads per run
    device: str = "cpu"  # cpu or cuda (one device; runs then go one at a time: workers=1)
    target_half_width: float = 3.0  # accuracy points: the 95% CI half-width the sizing aims at

    def __post_init__(self) -> None:
        unknown = sorted(set(self.losses) - set(LOSS_NAMES)) + sorted(set(self.tasks) - set(TASKS))
        if unknown:
            raise ConfigError(f"unknown losses or tasks {unknown}; losses {LOSS_NAMES}, tasks {TASKS}")
        if "mle" not in self.losses:
            raise ConfigError("losses must include mle: every difference is reported against it")
        for name, grid in self.grids.items():
            if name not in LOSS_NAMES or not grid or any(w <= 0 for w in grid):
                raise ConfigError(f"grids.{name}: a known loss with a non-empty list of lambdas > 0, got {grid}")
        if len(self.seeds) < 2:
            raise ConfigError("seeds: at least two (the confidence intervals are over seeds)")
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be cpu or cuda, got {self.device!r}")
        small = {k: v for k, v in self._sizes().items() if v < 1}
        if small:
            raise ConfigError(f"sizes must be >= 1: {small}")

    def _sizes(self) -> dict[str, int]:
        keys = ("train_size", "val_size", "test_size", "ood_size", "steps", "batch_size", "digits", "workers")
        return {k: getattr(self, k) for k in keys} | {"threads": self.threads, "eval_batch_size": self.eval_batch_size}

    def eval_size(self, split: str) -> int:
        return {"val": self.val_size, "test": self.test_size, "ood": self.ood_size}[split]

    def grid(self, loss: str) -> Optional[list[float]]:
        """The lambdas tried for ``loss`` (None: the loss is run at its only setting)."""
        return self.grids.get(loss)


# Keys that may change between invocations on one output_root (they do not change any result).
RESUMABLE_KEYS = ("output_root", "losses", "seeds", "workers", "threads", "eval_batch_size", "target_half_width")


def load_numeric_bench_config(recipe: Optional[str | Path] = None, overrides: Sequence[str] = ()) -> NumericBenchConfig:
    """The benchmark YAML ``recipe`` (or the defaults) with ``key=value`` overrides, validated."""
    return load_config(NumericBenchConfig, recipe, overrides)
