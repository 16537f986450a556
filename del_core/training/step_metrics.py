"""The metrics of one optimizer step: summed on the device over its micro-batches, read once.

Each micro-batch's objective output (:func:`del_core.training.objective.as_named_tensors`) is
already divided by the step's global counts, so the step's loss, CE and aux are plain sums over
micro-batches and data-parallel ranks; digit entropy and accuracy are weighted by each
micro-batch's digit count. Nothing here reads the device until :func:`read_step`, which reads
everything the step's record needs in one host sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from del_core.data.tokenized import TokenBatch, to_device
from del_core.parallel import max_over, sum_over
from del_core.training.records import TrainRecord

SUMMED = ("loss", "ce", "aux", "entropy_sum", "digit_hits", "digits")  # StepSums.values, in order
COUNTS = ("n_tokens", "n_digits", "attended_tokens")  # step_counts, in order
GradNorm = Union[torch.Tensor, float, None]


def step_counts(batches: Sequence[TokenBatch], device: torch.device, dp_group: Any) -> torch.Tensor:
    """The step's ``COUNTS`` (float64 [3] on ``device``), summed over the data-parallel group and
    never read here: counted on the host copies of this rank's micro-batches, copied with
    :func:`to_device`, all-reduced on the device (the ranks of a tensor-parallel group hold the
    same batch, so tensor parallelism is not summed over). Elements 0 and 1 are the loss's
    normalisers ``num_tokens`` / ``num_digits``."""
    host = torch.stack([batch.counts() for batch in batches]).sum(0).double()
    return sum_over(to_device(host, device), dp_group)


class StepSums:
    """This rank's sums of ``SUMMED`` over the micro-batches of one step, a float64 device tensor."""

    def __init__(self, device: torch.device):
        self.values = torch.zeros(len(SUMMED), dtype=torch.float64, device=device)

    def add(self, out: dict[str, torch.Tensor]) -> None:
        """Add one micro-batch's objective output (on the device, no read)."""
        digits = out["n_digits"].detach().double()
        parts = [out[name].detach().double() for name in ("loss", "ce", "aux")]
        parts += [out["digit_entropy"].detach().double() * digits, out["digit_acc"].detach().double() * digits, digits]
        self.values += torch.stack(parts)


@dataclass(frozen=True)
class StepReadout:
    """The host values of one step, from :func:`read_step`."""

    sums: dict[str, float]  # SUMMED and COUNTS, summed over the data-parallel ranks
    grad_norm: Optional[float]
    peak_mem_gb: float  # the largest over all ranks
    stop_requested: bool  # on any rank: every rank gets the same answer


def read_step(
    sums: StepSums, counts: torch.Tensor, grad_norm: GradNorm, peak_mem_gb: float, stop_requested: bool, dp_group: Any
) -> StepReadout:
    """Everything the step's record and the stop decision need, in ONE host sync.

    ``sums`` (this rank's) are summed over ``dp_group``; ``counts`` (:func:`step_counts`) are
    already summed; ``peak_mem_gb`` and ``stop_requested`` are written into a device tensor by
    fill kernels (no host-to-device copy) and max-reduced over the world; a ``grad_norm`` tensor
    on the same device joins them. All of it is concatenated on the device and read by a single
    ``tolist``. With one rank no collective runs. Collective: every rank calls it.
    """
    device = sums.values.device
    host_max = torch.stack(
        [torch.full((), value, dtype=torch.float64, device=device) for value in (peak_mem_gb, float(stop_requested))]
    )
    parts = [sum_over(sums.values, dp_group), counts, max_over(host_max)]
    norm_on_device = isinstance(grad_norm, torch.Tensor) and grad_norm.device == device
    if norm_on_device:
        parts.append(grad_norm.detach().double().reshape(1))
    values = torch.cat(parts).tolist()
    summed = len(SUMMED) + len(COUNTS)
    named = dict(zip((*SUMMED, *COUNTS), values[:summed]))
    peak, stop = values[summed : summed + 2]
    if norm_on_device:
        norm: Optional[float] = values[-1]
    else:  # a float, None, or a tensor kept elsewhere (a CPU tensor under optimizer offload: no device sync)
        norm = float(grad_norm) if grad_norm is not None else None
    return StepReadout(named, norm, peak, stop > 0)


def train_record(step: int, readout: StepReadout, lr: float, step_time_s: float) -> TrainRecord:
    """The step's :class:`TrainRecord` (``step_time_s`` measured after :func:`read_step`)."""
    sums = readout.sums
    digits = sums["digits"]
    return TrainRecord(
        step=step,
        loss=sums["loss"],
        ce=sums["ce"],
        aux=sums["aux"],
        digit_entropy=sums["entropy_sum"] / digits if digits else None,
        digit_acc=sums["digit_hits"] / digits if digits else None,
        n_tokens=sums["n_tokens"],
        n_digits=sums["n_digits"],
        lr=lr,
        grad_norm=readout.grad_norm,
        tokens_per_s=sums["attended_tokens"] / step_time_s,
        step_time_s=step_time_s,
        peak_mem_gb=readout.peak_mem_gb,
    )
