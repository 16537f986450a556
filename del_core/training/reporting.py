"""Where training metrics go: a tqdm bar and console lines, ``metrics.jsonl``, TensorBoard, wandb.

Only rank 0 builds a real reporter; other ranks get one whose methods do nothing. Every record is a
flat dict of numbers with ``step`` (optimizer steps done) and ``kind`` (train, eval, final).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

_CONSOLE_KEYS = (
    ("loss", "loss {:.4f}"), ("ce", "ce {:.4f}"), ("aux", "aux {:.4f}"), ("digit_entropy", "H(dig) {:.3f}"),
    ("digit_acc", "dig acc {:.3f}"), ("lr", "lr {:.2e}"), ("grad_norm", "gnorm {:.3f}"),
    ("tokens_per_s", "{:.0f} tok/s"), ("peak_mem_gb", "mem {:.2f} GB"),
)


class Reporter:
    def __init__(self, output_dir: Path, report_to: tuple, total_steps: int, start_step: int, run_name: str,
                 config: dict, wandb_project: str = "del"):
        from tqdm import tqdm

        self.output_dir = Path(output_dir)
        self.jsonl = open(self.output_dir / "metrics.jsonl", "a") if "jsonl" in report_to else None
        self.tensorboard = None
        if "tensorboard" in report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tensorboard = SummaryWriter(str(self.output_dir / "tensorboard"))
            except ImportError:
                print("[report] tensorboard is not installed: no TensorBoard logs (pip install tensorboard)", flush=True)
        self.wandb = None
        if "wandb" in report_to:
            try:
                import wandb

                self.wandb = wandb.init(project=wandb_project, name=run_name, config=config, resume="allow")
            except ImportError:
                print("[report] report_to has wandb but the wandb package is not installed", flush=True)
        self.bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True,
                        file=sys.stderr, disable=None)
        self.started = time.time()

    def log(self, record: dict[str, Any], console: bool = True) -> None:
        record = {"time": round(time.time() - self.started, 3), **record}
        if self.jsonl is not None:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()
        step = int(record.get("step", 0))
        kind = record.get("kind", "train")
        numbers = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k not in ("step", "time")}
        if self.tensorboard is not None:
            for key, value in numbers.items():
                self.tensorboard.add_scalar(f"{kind}/{key}", value, step)
        if self.wandb is not None:
            self.wandb.log({f"{kind}/{k}": v for k, v in numbers.items()}, step=step)
        if console:
            if kind == "train":
                parts = [fmt.format(record[k]) for k, fmt in _CONSOLE_KEYS if record.get(k) is not None]
                self.write(f"step {step:>6} | " + " | ".join(parts))
            else:
                shown = " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in numbers.items())
                self.write(f"[{kind}] step {step}: {shown}")

    def advance(self, record: Optional[dict] = None) -> None:
        self.bar.update(1)
        if record:
            self.bar.set_postfix(loss=f"{record['loss']:.4f}", refresh=False)

    def write(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)
        sys.stdout.flush()

    def close(self) -> None:
        self.bar.close()
        if self.jsonl is not None:
            self.jsonl.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()


class SilentReporter:
    """The reporter of ranks other than 0."""

    def log(self, record: dict, console: bool = True) -> None:
        pass

    def advance(self, record: Optional[dict] = None) -> None:
        pass

    def write(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
