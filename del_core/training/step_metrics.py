"""The metrics of one optimizer step, accumulated by name over its micro-batches.

Each micro-batch's objective output (:func:`del_core.training.objective.as_named_tensors`) is
already divided by the step's global counts, so the step's loss, CE and aux are plain sums over
micro-batches and data-parallel ranks; digit entropy and accuracy are weighted by each
micro-batch's digit count. Reading the sums costs one host sync per step (:meth:`reduce`).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from del_core.parallel import sum_named
from del_core.training.records import TrainRecord

_SUMMED = ("loss", "ce", "aux")


class StepSums:
    """Named device-side sums over the micro-batches of this rank."""

    def __init__(self, device: torch.device):
        zero = torch.zeros((), dtype=torch.float64, device=device)
        self.device = device
        self.values: dict[str, torch.Tensor] = {
            name: zero.clone() for name in (*_SUMMED, "entropy_sum", "digit_hits", "digits")
        }
        self.attended_tokens = 0  # host count, from the CPU copy of the batches

    def add(self, out: dict[str, torch.Tensor], attended_tokens: int) -> None:
        for name in _SUMMED:
            self.values[name] += out[name].detach().double()
        digits = out["n_digits"].double()
        self.values["entropy_sum"] += out["digit_entropy"].double() * digits
        self.values["digit_hits"] += out["digit_acc"].double() * digits
        self.values["digits"] += digits
        self.attended_tokens += attended_tokens

    def reduce(self, group: Any) -> dict[str, float]:
        """The sums over the data-parallel ``group`` (tensor-parallel ranks hold identical copies)."""
        values = {**self.values, "attended_tokens": float(self.attended_tokens)}
        return sum_named(values, self.device, group)


def train_record(
    step: int,
    sums: dict[str, float],
    n_tokens: float,
    n_digits: float,
    lr: float,
    grad_norm: Optional[float],
    step_time_s: float,
    peak_mem_gb: float,
) -> TrainRecord:
    digits = sums["digits"]
    return TrainRecord(
        step=step,
        loss=sums["loss"],
        ce=sums["ce"],
        aux=sums["aux"],
        digit_entropy=sums["entropy_sum"] / digits if digits else None,
        digit_acc=sums["digit_hits"] / digits if digits else None,
        n_tokens=n_tokens,
        n_digits=n_digits,
        lr=lr,
        grad_norm=grad_norm,
        tokens_per_s=sums["attended_tokens"] / step_time_s,
        step_time_s=step_time_s,
        peak_mem_gb=peak_mem_gb,
    )
