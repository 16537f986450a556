"""The pre-pass of a loss that scales its term by whole-batch totals (NTIL's CE / term).

Such a loss (``LossNeeds.step_totals``) cannot be summed over micro-batches as it goes: its
detached scale is a ratio of two sums over the whole global batch, known only after every
micro-batch of the step has been forwarded. :func:`measure_step_totals` forwards the step's
micro-batches once more without gradients, first: the loss reports its two sums per call
(:meth:`NumericLoss.begin_step_totals`), they are summed over the micro-batches and the
data-parallel ranks, and handed back (:meth:`NumericLoss.set_step_totals`); the step's own
micro-batches then scale their terms by the global ratio, and their losses and gradients add up to
the one-batch computation. The model stays in its mode and the random state is forked, so that
the step's own forward draws the same dropout masks (and the loss the same noise) as the pre-pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import torch

from .base import NumericLoss

MicroBatch = TypeVar("MicroBatch")


def measure_step_totals(
    loss: NumericLoss,
    micro_batches: Iterable[MicroBatch],
    unit_terms: Callable[[MicroBatch], torch.Tensor],
    sum_over_ranks: Callable[[torch.Tensor], torch.Tensor],
    rng_devices: Sequence[int] = (),
) -> None:
    """Give ``loss`` the totals of this step's global batch before its micro-batches run.

    ``unit_terms(micro_batch)``: the [2] tensor ``(ce, aux)`` of one of this rank's micro-batches
    with the global normalisers (what the trainer's forward returns); ``sum_over_ranks``: the sum
    of a [2] tensor over the data-parallel ranks (a collective: every rank calls this function).
    Nothing is read to the host. The caller clears the totals after the step
    (``loss.set_step_totals(None)``)."""
    loss.begin_step_totals()
    totals = None
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=list(rng_devices)):
            for micro_batch in micro_batches:
                terms = unit_terms(micro_batch).detach().double()
                totals = terms if totals is None else totals + terms
    except BaseException:
        loss.set_step_totals(None)
        raise
    if totals is None:
        loss.set_step_totals(None)
        raise ValueError("step totals: the step has no micro-batch on this rank")
    loss.set_step_totals(sum_over_ranks(totals))
