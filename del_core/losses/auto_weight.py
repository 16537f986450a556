"""``weight="auto"``: lambda from the ratio of the digit term to CE at the start of training.

The digit terms differ in scale by orders of magnitude between models. DEL's term is a BCE on raw
logits: at a randomly initialised model (logits near 0) each class costs ~log 2 and the term is
about half the CE (0.52 x CE, the from-scratch benchmark); a pretrained LM's raw logits are large and
positive, so every wrong digit class costs about its logit and the term is ~29x the CE
(SmolLM2-135M-Instruct on the main job's problems). The paper's lambda 0.128 then makes the DEL part
3.8x the CE on the first step: its gradient, ~50x the CE's, is what the clipping keeps, and the
fine-tune learns less (docs/lambda.md). A lambda that works on one model is not a lambda for another.

The rule: lambda = ratio x CE / T on the first step's global batch, where T is the loss's digit
term at weight 1 (the mean over digit positions); the weighted term then starts at ``ratio`` x CE.
``DEFAULT_AUTO_RATIO`` is the ratio of the lambda the from-scratch benchmark chose on validation
for DEL (0.032 x 0.52 = 0.017, rounded to 0.02); docs/lambda.md has the measurements.

:func:`auto_weight` is the rule; :func:`measure_auto_weight` runs a model on the first step's
micro-batches to get its two inputs, for both trainers (``recipes/train.py`` and ``DELTrainer``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

DEFAULT_AUTO_RATIO = 0.02
# lambda of a loss built for weight="auto" until the first batch has been measured: at weight 1 the
# loss's aux part is its digit term at weight 1, the T of the rule.
AUTO_PLACEHOLDER = 1.0

MicroBatch = TypeVar("MicroBatch")


class AutoWeightError(ValueError):
    """A first batch that cannot set lambda (no digit position in it, or a diverged model)."""


def auto_weight(ce: float, unit_term: float, ratio: float = DEFAULT_AUTO_RATIO) -> float:
    """lambda = ``ratio`` x ``ce`` / ``unit_term`` (the CE and the weight-1 digit term, both means
    over the same global batch). :class:`AutoWeightError` (a ValueError) when the batch gives no
    finite positive values (no digit position in it, or a diverged model)."""
    if not ratio > 0:
        raise AutoWeightError(f"auto weight: the ratio must be > 0, got {ratio}")
    if not (math.isfinite(ce) and math.isfinite(unit_term)) or ce <= 0 or unit_term <= 0:
        raise AutoWeightError(
            f"auto weight: the first batch gives CE {ce} and digit term {unit_term}; both must be finite and "
            "> 0 (a batch without digit positions cannot set lambda: set loss.weight to a number)"
        )
    return ratio * ce / unit_term


@dataclass(frozen=True)
class AutoWeight:
    """The chosen lambda and what it was computed from (means over the first step's global batch)."""

    weight: float
    ce: float
    unit_term: float  # the loss's digit term at weight 1
    ratio: float

    @classmethod
    def measure(cls, ce: float, unit_term: float, ratio: float) -> AutoWeight:
        """The record of :func:`auto_weight` (:class:`AutoWeightError` as it raises)."""
        return cls(auto_weight(ce, unit_term, ratio), ce, unit_term, ratio)

    def describe(self, loss: str) -> str:
        return (
            f"[loss] {loss} weight auto = {self.weight:.4g}: the first batch's CE {self.ce:.4f}, digit term at "
            f"weight 1 {self.unit_term:.4f} (x{self.unit_term / self.ce:.3g} the CE), ratio {self.ratio}"
        )


def measure_auto_weight(
    model: torch.nn.Module,
    micro_batches: Iterable[MicroBatch],
    unit_terms: Callable[[MicroBatch], torch.Tensor],
    sum_over_ranks: Callable[[torch.Tensor], torch.Tensor],
    ratio: float,
    rng_devices: Sequence[int] = (),
    dtype: torch.dtype = torch.float64,
) -> AutoWeight:
    """lambda of ``weight="auto"`` from the first optimizer step's global batch, at the initial weights.

    ``unit_terms(micro_batch)``: the [2] tensor (CE, aux) of one of this rank's micro-batches,
    each a sum over its positions divided by the global batch's token and digit counts, scored by
    the loss at :data:`AUTO_PLACEHOLDER` (so that aux is the digit term at weight 1).
    ``sum_over_ranks``: the sum of a [2] tensor over the data-parallel ranks (a collective: every
    rank calls this function). The micro-batches' terms are summed in ``dtype`` (the DeepSpeed
    trainer keeps float32, the sum its lambdas have always been measured with; the Trainer
    adapter float64). ``model`` runs in eval mode (dropout off) without gradients, with the RNG of
    the CPU and of the CUDA ``rng_devices`` forked, so that training after it is unchanged.
    :class:`AutoWeightError` when the batch cannot set lambda.
    """
    was_training = model.training
    model.eval()
    totals = None
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=list(rng_devices)):
            for micro_batch in micro_batches:
                terms = unit_terms(micro_batch).detach()
                if totals is None:
                    totals = torch.zeros(2, dtype=dtype, device=terms.device)
                totals = totals + terms
    finally:
        model.train(was_training)
    if totals is None:
        raise AutoWeightError("auto weight: the first step has no micro-batch on this rank")
    ce, unit_term = sum_over_ranks(totals.double()).tolist()
    return AutoWeight.measure(ce, unit_term, ratio)
