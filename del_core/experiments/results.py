"""The one record of a finished unit: :class:`UnitResult`, its scores per evaluated split, its
training curve and its wall time; written as the unit's done marker
(:mod:`del_core.experiments.output_root`) and read back by the reports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Optional, TypeVar

from del_core.experiments.grid import Unit

Scores = TypeVar("Scores")  # a user's dataclass of one split's scores


@dataclass
class UnitResult(Generic[Scores]):
    """A finished unit: ``spec`` (the unit it ran), ``evals`` (split name -> that split's scores, a
    dataclass of the experiment), ``curve`` (per logged step: step, loss, ce, ... as floats) and
    ``wall_s`` (seconds of the unit; None when not measured)."""

    spec: Unit
    evals: dict[str, Scores]
    curve: list[dict[str, Any]] = field(default_factory=list)
    wall_s: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        evals = {split: asdict(scores) for split, scores in self.evals.items()}
        return {"spec": asdict(self.spec), "evals": evals, "curve": self.curve, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, data: dict[str, Any], scores: Callable[..., Scores]) -> UnitResult[Scores]:
        """The record of :meth:`to_json`; ``scores(**fields)`` rebuilds one split's scores."""
        evals = {split: scores(**values) for split, values in data["evals"].items()}
        return cls(Unit(**data["spec"]), evals, data["curve"], data["wall_s"])
