"""``loss.weight=auto`` in a run: the lambda measured on the first step's batch, kept in the output
directory so that a resumed run uses the same one (the rule: :mod:`del_core.losses.auto_weight`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from del_core.config import ConfigError
from del_core.losses import auto_weight

AUTO_WEIGHT_FILE = "auto_loss_weight.json"  # in OUTPUT_DIR


@dataclass(frozen=True)
class AutoWeight:
    """The chosen lambda and what it was computed from (means over the first step's global batch)."""

    weight: float
    ce: float
    unit_term: float  # the loss's digit term at weight 1
    ratio: float

    @classmethod
    def measure(cls, ce: float, unit_term: float, ratio: float) -> AutoWeight:
        try:
            return cls(auto_weight(ce, unit_term, ratio), ce, unit_term, ratio)
        except ValueError as err:
            raise ConfigError(f"loss.weight=auto: {err}") from None

    def describe(self, loss: str) -> str:
        return (
            f"[loss] {loss} weight auto = {self.weight:.4g}: the first batch's CE {self.ce:.4f}, digit term at "
            f"weight 1 {self.unit_term:.4f} (x{self.unit_term / self.ce:.3g} the CE), ratio {self.ratio}"
        )

    def save(self, output_dir: Path) -> Path:
        path = output_dir / AUTO_WEIGHT_FILE
        staging = path.with_name(path.name + ".partial")
        staging.write_text(json.dumps(asdict(self), indent=1) + "\n")
        staging.replace(path)
        return path

    @classmethod
    def load(cls, output_dir: Path) -> AutoWeight:
        """The lambda a resumed run chose at its start; ConfigError when the file is missing or bad."""
        path = output_dir / AUTO_WEIGHT_FILE
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            raise ConfigError(
                f"loss.weight=auto: resuming, but {path} (the lambda chosen at step 0) is missing; "
                "set loss.weight to the run's lambda"
            ) from None
        except (ValueError, TypeError) as err:
            raise ConfigError(f"loss.weight=auto: {path} is unreadable ({err}); set loss.weight to a number") from None
