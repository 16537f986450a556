"""The loss parts and digit metrics of the optimizer steps between two Trainer logs.

Per micro-batch the del_core loss returns ``ce`` and ``aux`` already divided by the global
normalisers, so their sum over the micro-batches of a step and over all ranks is the step's CE and
auxiliary term of the whole global batch; ``digit_entropy`` / ``digit_acc`` are means over the
micro-batch's digits, so they are summed weighted by its digit count and divided by the total.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from del_core.losses import LossOutput

# Running sums, in this order: ce, aux, digit entropy x digits, digit hits, digits.
_SUMS = 5


class LoggedMetrics:
    """Sums over the micro-batches since the last log; ``steps`` counts the optimizer steps.

    :meth:`add` keeps everything on the device (no host sync); :meth:`collect` reduces over the
    ranks with the given ``gather`` (a collective: every rank calls it) and reads the result once.
    """

    def __init__(self) -> None:
        self.sums: Optional[torch.Tensor] = None
        self.steps = 0

    def start_step(self) -> None:
        self.steps += 1

    def add(self, out: LossOutput) -> None:
        """Accumulate one micro-batch's loss output (detached)."""
        metrics = out.metrics
        digits = metrics["n_digits"].float()
        zero = torch.zeros_like(digits)
        entropy = metrics.get("digit_entropy", zero).float() * digits
        hits = metrics.get("digit_acc", zero).float() * digits
        values = torch.stack([out.ce.detach().float(), out.aux.detach().float(), entropy, hits, digits])
        self.sums = values if self.sums is None else self.sums + values

    def collect(
        self, gather: Optional[Callable[[torch.Tensor], torch.Tensor]], device: torch.device
    ) -> dict[str, float]:
        """``ce``, ``aux`` (means over the steps, of the whole global batch), ``digit_entropy`` and
        ``digit_acc`` (over all digit positions of those steps); empty when no step started (the
        same on every rank, so either every rank gathers or none does). ``gather`` maps a [1, 5]
        tensor to the [ranks, 5] tensor of all ranks (None: one process). Resets the sums."""
        sums, steps = self.sums, self.steps
        self.sums, self.steps = None, 0
        if steps == 0:
            return {}
        if sums is None:  # this rank had no micro-batch in those steps
            sums = torch.zeros(_SUMS, device=device)
        if gather is not None:
            sums = gather(sums.unsqueeze(0)).reshape(-1, _SUMS).sum(0)
        ce, aux, entropy, hits, digits = sums.tolist()
        return {
            "ce": ce / steps,
            "aux": aux / steps,
            "digit_entropy": entropy / max(digits, 1.0),
            "digit_acc": hits / max(digits, 1.0),
        }
