"""``loss.weight=auto`` in a run: the lambda measured on the first step's batch, kept in the output
directory so that a resumed run uses the same one (the rule and its measurement:
:mod:`del_core.losses.auto_weight`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from del_core.config import ConfigError
from del_core.losses import AutoWeight, AutoWeightError

AUTO_WEIGHT_FILE = "auto_loss_weight.json"  # in OUTPUT_DIR


def run_auto_weight(measure: Callable[[], AutoWeight], output_dir: Path, step: int, is_main: bool) -> AutoWeight:
    """The run's lambda: at step 0 ``measure()`` (a collective on every rank), saved into
    ``output_dir`` by the main rank; on a resume the one saved at step 0. ConfigError when the
    first batch cannot set lambda or the saved one is missing or unreadable."""
    if step > 0:
        return load_auto_weight(output_dir)
    try:
        chosen = measure()
    except AutoWeightError as err:
        raise ConfigError(f"loss.weight=auto: {err}") from None
    if is_main:
        save_auto_weight(chosen, output_dir)
    return chosen


def save_auto_weight(chosen: AutoWeight, output_dir: Path) -> Path:
    path = output_dir / AUTO_WEIGHT_FILE
    staging = path.with_name(path.name + ".partial")
    staging.write_text(json.dumps(asdict(chosen), indent=1) + "\n")
    staging.replace(path)
    return path


def load_auto_weight(output_dir: Path) -> AutoWeight:
    """The lambda a resumed run chose at its start; ConfigError when the file is missing or bad."""
    path = output_dir / AUTO_WEIGHT_FILE
    try:
        return AutoWeight(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise ConfigError(
            f"loss.weight=auto: resuming, but {path} (the lambda chosen at step 0) is missing; "
            "set loss.weight to the run's lambda"
        ) from None
    except (ValueError, TypeError) as err:
        raise ConfigError(f"loss.weight=auto: {path} is unreadable ({err}); set loss.weight to a number") from None
