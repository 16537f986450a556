"""Where training metrics go: a tqdm bar and console lines, ``metrics.jsonl``, TensorBoard, wandb.

Only rank 0 builds a :class:`Reporter`; other ranks get a :class:`SilentReporter`. Every record is
one of the typed records of :mod:`del_core.training.records`, which also define the JSONL schema.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from del_core.data.jsonl import JsonlAppender
from del_core.training.records import EvalRecord, MetricsRecord, TrainRecord, record_to_json

_CONSOLE_FIELDS = (
    ("loss", "loss {:.4f}"),
    ("ce", "ce {:.4f}"),
    ("aux", "aux {:.4f}"),
    ("digit_entropy", "H(dig) {:.3f}"),
    ("digit_acc", "dig acc {:.3f}"),
    ("lr", "lr {:.2e}"),
    ("grad_norm", "gnorm {:.3f}"),
    ("tokens_per_s", "{:.0f} tok/s"),
    ("peak_mem_gb", "mem {:.2f} GB"),
)


def console_line(record: MetricsRecord) -> Optional[str]:
    """The console text of a record (None for the final record, which the summary table shows)."""
    if isinstance(record, TrainRecord):
        parts = [
            fmt.format(getattr(record, name)) for name, fmt in _CONSOLE_FIELDS if getattr(record, name) is not None
        ]
        return f"step {record.step:>6} | " + " | ".join(parts)
    if isinstance(record, EvalRecord):
        shown = " ".join(f"{k} {v:.4f}" for k, v in _scalars(record).items())
        return f"[eval] {record.label}, step {record.step}: {shown}"
    return None


def _scalars(record: MetricsRecord) -> dict[str, float]:
    """The record's numeric fields (not ``step``), nested records flattened as ``last/ce``."""
    flat: dict[str, float] = {}
    for key, value in record_to_json(record).items():
        if isinstance(value, dict):
            flat.update({f"{key}/{k}": v for k, v in value.items() if _is_number(v) and k != "step"})
        elif _is_number(value) and key != "step":
            flat[key] = value
    return flat


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Reporter:
    """Rank 0's sinks; ``report_to`` names them (jsonl, tensorboard, wandb)."""

    def __init__(
        self,
        output_dir: Path,
        report_to: Sequence[str],
        total_steps: int,
        start_step: int,
        run_name: str,
        config: dict,
        wandb_project: str = "del",
    ):
        from tqdm import tqdm

        self.output_dir = Path(output_dir)
        self.started = time.time()
        self.bar = tqdm(
            total=total_steps,
            initial=start_step,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
            disable=None,
        )
        self.jsonl = JsonlAppender(self.output_dir / "metrics.jsonl") if "jsonl" in report_to else None
        self.tensorboard = self._tensorboard() if "tensorboard" in report_to else None
        self.wandb = self._wandb(wandb_project, run_name, config) if "wandb" in report_to else None

    def _tensorboard(self):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            self.write("[report] tensorboard is not installed: no TensorBoard logs (pip install tensorboard)")
            return None
        return SummaryWriter(str(self.output_dir / "tensorboard"))

    def _wandb(self, project: str, run_name: str, config: dict):
        try:
            import wandb
        except ImportError:
            self.write("[report] report_to has wandb but the wandb package is not installed")
            return None
        return wandb.init(project=project, name=run_name, config=config, resume="allow")

    def log(self, record: MetricsRecord, console: bool = True) -> None:
        if self.jsonl is not None:
            self.jsonl.append({**record_to_json(record), "time": round(time.time() - self.started, 3)})
        scalars = _scalars(record)
        if self.tensorboard is not None:
            for key, value in scalars.items():
                self.tensorboard.add_scalar(f"{record.kind}/{key}", value, record.step)
        if self.wandb is not None:
            self.wandb.log({f"{record.kind}/{k}": v for k, v in scalars.items()}, step=record.step)
        line = console_line(record) if console else None
        if line:
            self.write(line)

    def advance(self, record: Optional[TrainRecord] = None) -> None:
        self.bar.update(1)
        if record is not None:
            self.bar.set_postfix(loss=f"{record.loss:.4f}", refresh=False)

    def write(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)
        sys.stdout.flush()

    def close(self) -> None:
        self.bar.close()
        for sink in (self.jsonl, self.tensorboard):
            if sink is not None:
                sink.close()
        if self.wandb is not None:
            self.wandb.finish()


class SilentReporter:
    """The reporter of ranks other than 0."""

    def log(self, record: MetricsRecord, console: bool = True) -> None:
        pass

    def advance(self, record: Optional[TrainRecord] = None) -> None:
        pass

    def write(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
