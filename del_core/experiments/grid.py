"""The units of an experiment: one (loss, lambda, seed) run in one phase, and their grid.

Units of the same seed share the initial weights and the batch order, so the grid is seed-major:
an interrupted experiment has whole seeds done (every loss paired), not whole losses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional, Union

Weight = Optional[Union[float, str]]  # a lambda, "auto" (from the first batch), or None (the loss's own)


@dataclass(frozen=True)
class Unit:
    """What distinguishes one run: the loss, its lambda (``weight``; None: the loss's default or it
    has none), the seed, and the phase (the experiment's name for what the unit is scored on:
    ``select``, ``test``, ``untrained``...)."""

    loss: str
    weight: Weight
    seed: int
    phase: str = "test"

    @property
    def name(self) -> str:
        """``PHASE/LOSS-wWEIGHT-sSEED``: unique within an experiment, usable as a file name."""
        weight = (
            "none" if self.weight is None else (self.weight if isinstance(self.weight, str) else f"{self.weight:g}")
        )
        return f"{self.phase}/{self.loss}-w{weight}-s{self.seed}"


def seed_major_grid(
    losses: Sequence[str], seeds: Sequence[int], weight_of: Callable[[str], Weight], phase: str = "test"
) -> list[Unit]:
    """Seed by seed, every loss at ``weight_of(loss)``."""
    return [Unit(loss, weight_of(loss), seed, phase) for seed in seeds for loss in losses]
