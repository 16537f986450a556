"""ntloss's NumberLevelLoss: the Number Token Loss scored per number rather than per digit token.

At every digit position the expected digit ``yhat_t = sum_c c softmax(z_t[digits])_c``; a number
(a run of digits, :mod:`.number_runs`) is predicted as ``X = sum_t yhat_t 10^e_t`` (e_t the digits
after t in the run) against its value ``Y``, and scored with the symmetric relative error
``|X - Y| / (|X| + |Y| + eps)`` in [0, 1]. With ``reweigh`` the score is blended with the full
softmax's mass m on the ten digits at the number's first digit: ``L m + 1.01 (1 - m)``.

The term of a number sits at its first digit; the project divides the sum over numbers by the
global digit count (the normaliser every trainer provides), where the package takes the mean
over the batch's numbers: lambda here equals the package's lambda times numbers / digits.
"""

from __future__ import annotations

from typing import Union

import torch

from ..vocab import DigitVocab
from .base import Batch, DigitAuxLoss, LossNeeds
from .number_runs import ShardRuns, number_sum

# ntloss's eps of the relative error: its number values are float32 whatever the logits' dtype.
RELATIVE_ERROR_EPS = float(torch.finfo(torch.float32).eps)
# ntloss's reweighing: a number predicted outside the digits costs 1.01 x the largest error (1).
OUTSIDE_DIGITS_COST = 1.01


def number_level_term(
    digit_logits: torch.Tensor, layout: ShardRuns, digit_mass: torch.Tensor, reweigh: bool
) -> torch.Tensor:
    """[N] the per-number term at each run's first digit, 0 elsewhere.

    ``digit_logits`` [N, 10] the digit logits (finite at digit positions), ``layout`` the labels'
    runs (:func:`shard_runs`; under sequence parallelism the term sits on the rank holding the
    first digit, its sums taken over the group), ``digit_mass`` [N] the full softmax's mass on the ten digits (used with
    ``reweigh`` at the first digits only)."""
    dtype, runs = digit_logits.dtype, layout.runs
    values = torch.arange(10, device=digit_logits.device, dtype=dtype)
    expected = (torch.softmax(digit_logits, dim=-1) * values).sum(-1)
    place = torch.pow(10.0, runs.digits_after.to(dtype))
    predicted = number_sum(expected * place, layout)
    target = number_sum(runs.digit.to(dtype) * place, layout)
    error = (predicted - target).abs() / (predicted.abs() + target.abs() + RELATIVE_ERROR_EPS)
    if reweigh:
        error = error * digit_mass + OUTSIDE_DIGITS_COST * (1.0 - digit_mass)
    return torch.where(runs.is_run_start, error, torch.zeros_like(error))


class NumberLevelLoss(DigitAuxLoss):
    """ntloss 0.3.2's ``NumberLevelLoss`` (single-digit vocabularies): CE + lambda x the per-number
    relative error summed over the numbers and divided by the global digit count.

    ``float_level``: a single point between two digits joins them into one number ("12.34" is
    1234; default False: 12 and 34). ``reweigh``: blend with the digit mass (ntloss's default
    True; the project's default False: the ICML paper did not use it, and its author notes that it
    inflates this loss)."""

    name = "number_level"
    needs = LossNeeds(vocab=True)

    def __init__(
        self,
        vocab: DigitVocab,
        weight: float,
        float_level: bool = False,
        reweigh: bool = False,
        validate: Union[bool, str] = "async",
    ):
        super().__init__(vocab, weight, validate)
        if vocab.multi_digit:
            raise ValueError(
                f"{self.name}: the vocabulary {vocab.name or '<unnamed>'} writes numbers in multi-digit tokens; "
                "ntloss's number-level loss builds each number from single-digit tokens (use del, ntl_was or smmd)"
            )
        self.float_level = bool(float_level)
        self.reweigh = bool(reweigh)

    def _plain_ce(self) -> bool:
        # The reweighing reads the full softmax's digit mass through the per-token CE.
        return not self.reweigh

    def digit_part(self, batch: Batch) -> torch.Tensor:
        layout = batch.number_runs(self.float_level, self.sequence_shard)
        logits = batch.digit_logits
        mass = torch.zeros_like(batch.stats.ce)
        if self.reweigh:
            # m = sum_d exp(z_d - lse) with lse = ce + z_y: no second pass over the vocabulary.
            target_logit = logits.gather(-1, batch.target_digit.unsqueeze(-1)).squeeze(-1)
            mass = torch.exp(torch.logsumexp(logits, dim=-1) - target_logit - batch.stats.ce)
        return number_level_term(logits, layout, mass, self.reweigh)
