"""NTIL (Numerical Token Integrity Loss): a place-weighted digit Earth Mover's Distance plus
whole-number error terms, rescaled to a fixed share of the CE (single-digit vocabularies).

Per sequence, over its digit runs (:mod:`.number_runs`; the point ends a run):

* digit EMD: ``EMD_t = sum_c |c - d_t| softmax(z_t[digits])_c`` weighted ``digit_exp ** k_t``
  (k_t the digits after t in its run), averaged over the sequence's digit positions;
* whole numbers: each run's digits predicted by a straight-through hard Gumbel-softmax (forward:
  the one-hot of ``argmax(z + g)``; gradient: through ``softmax((z + g) / tau)``), read as the
  number X against the label's number Y: ``abs = |X - Y| / (max(X, Y) + 1)`` (0 where X == Y) and
  ``mag = log((max + 1) / (min + 1))``, averaged over the sequence's runs;
* ``T_s = digit_alpha EMD + abs_alpha abs + mag_alpha mag``; the term is the mean of T_s over the
  sequences of the batch (0 for a sequence without digits).

The loss is ``CE + lambda (CE / (term + 1e-10)).detach() term``: the term's value is rescaled to
lambda x CE (lambda 0.3 in the released code). Because the rescaling divides by the term, the
term's normaliser cancels; the CE and the term are those of the call (see :meth:`NTILLoss.weighted_aux`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from ..vocab import DigitVocab
from .base import Batch, DigitAuxLoss, LossNeeds
from .digit_terms import ntl_was_term
from .number_runs import ShardRuns, number_sum

NTIL_DEFAULT_WEIGHT = 0.3  # the released ntil_lambda
RATIO_EPS = 1e-10  # the released code's guard in CE / term
_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of int64 ``x`` (values below 2^32; products stay below 2^63)."""
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    return (x >> 16) ^ x


def hashed_uniform(like: torch.Tensor, key: torch.Tensor, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Uniform numbers in (0, 1) shaped and typed like ``like``, a hash of each element's index and
    the int64 0-dim ``key``: no generator object (so it compiles), the same numbers on every device.
    ``positions`` [N] (``like`` [N, C]): the rows' indices in the whole batch (a sequence-parallel
    shard, or a call on the scored positions alone, draws the numbers of its positions in the whole
    batch); None: ``0..N-1``."""
    index = torch.arange(like.numel(), device=like.device, dtype=torch.int64).view(like.shape)
    if positions is not None:
        columns = like.shape[-1]
        index = positions.unsqueeze(-1) * columns + torch.arange(columns, device=like.device)
    # 23 of the 32 bits: (k + 0.5) / 2^23 stays below 1 in float32 (log(1) would give infinite noise)
    bits = _mix32((index * 0x9E3779B1 + key) & _MASK32) >> 9
    return (bits.to(like.dtype) + 0.5) / 2.0**23


def gumbel_noise(
    like: torch.Tensor, key: torch.Tensor, scale: float, positions: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """``scale`` x standard Gumbel noise, ``-log(-log(u))`` of :func:`hashed_uniform`."""
    return -scale * torch.log(-torch.log(hashed_uniform(like, key, positions)))


@dataclass(frozen=True)
class NTILWeights:
    """The released code's coefficients: place base and the three terms' weights."""

    digit_exp: float = 1.2
    digit_alpha: float = 1.0
    abs_alpha: float = 0.2
    mag_alpha: float = 0.2


def straight_through_digits(digit_logits: torch.Tensor, noise: Optional[torch.Tensor], tau: float) -> torch.Tensor:
    """[N] the predicted digit value of each row of ``digit_logits`` [N, 10]: forward the argmax of
    ``z + noise`` (an exact integer), gradient that of ``sum_c c softmax((z + noise) / tau)_c``."""
    perturbed = digit_logits if noise is None else digit_logits + noise
    soft = torch.softmax(perturbed / tau, dim=-1)
    classes = torch.arange(10, device=digit_logits.device)
    hard = (perturbed.argmax(-1, keepdim=True) == classes).to(soft.dtype)
    chosen = hard - soft.detach() + soft
    return (chosen * classes.to(soft.dtype)).sum(-1)


def whole_number_errors(predicted: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(abs, mag) [N] of predicted numbers X against targets Y (both >= 0)."""
    high, low = torch.maximum(predicted, target), torch.minimum(predicted, target)
    relative = (predicted - target).abs() / (high + 1.0)
    relative = torch.where(predicted == target, torch.zeros_like(relative), relative)
    return relative, torch.log((high + 1.0) / (low + 1.0))


def ntil_sequence_terms(
    digit_logits: torch.Tensor,
    layout: ShardRuns,
    weights: NTILWeights,
    noise: Optional[torch.Tensor],
    tau: float,
) -> torch.Tensor:
    """[N] per-position shares of the per-sequence terms: summed over the positions they give
    ``sum_s T_s``. ``digit_logits`` [N, 10] (finite at digit positions), ``layout`` the labels'
    runs (:func:`shard_runs`: under sequence parallelism the counts are those of the whole
    sequences and a number's whole-number terms sit on the rank holding its first digit),
    ``noise`` [N, 10] the scaled Gumbel noise or None."""
    dtype, runs = digit_logits.dtype, layout.runs
    digits = layout.digits_per_row.clamp_min(1).to(dtype)[runs.row]
    n_runs = layout.runs_per_row.clamp_min(1).to(dtype)[runs.row]
    place = runs.digits_after.to(dtype)
    emd = ntl_was_term(digit_logits, runs.digit)
    share = weights.digit_alpha * torch.pow(weights.digit_exp, place) * emd / digits
    power = torch.pow(10.0, place)
    predicted = number_sum(straight_through_digits(digit_logits, noise, tau) * power, layout)
    target = number_sum(runs.digit.to(dtype) * power, layout)
    relative, magnitude = whole_number_errors(predicted, target)
    whole = (weights.abs_alpha * relative + weights.mag_alpha * magnitude) / n_runs
    share = share + torch.where(runs.is_run_start, whole, torch.zeros_like(whole))
    return torch.where(runs.is_digit, share, torch.zeros_like(share))


class NTILLoss(DigitAuxLoss):
    """NTIL (ACL 2025) as released: ``CE + lambda (CE / (term + 1e-10)).detach() term``.

    ``noise_scale`` (0.01) scales the Gumbel noise; 0 gives the plain argmax (deterministic).
    The noise of a call is a hash of ``(seed, step, call, element)`` (:func:`gumbel_noise`):
    :meth:`set_step` (the trainer's step) starts each step's stream, so that runs stay
    reproducible and resumable; the counters are buffers, so a compiled loss does not recompile.
    ``tau`` (0.1) is the Gumbel-softmax temperature."""

    name = "ntil"
    needs = LossNeeds(vocab=True, step_totals=True, per_sequence=True)

    def __init__(
        self,
        vocab: DigitVocab,
        weight: float,
        digit_exp: float = 1.2,
        digit_alpha: float = 1.0,
        abs_alpha: float = 0.2,
        mag_alpha: float = 0.2,
        noise_scale: float = 0.01,
        tau: float = 0.1,
        seed: int = 0,
        validate: Union[bool, str] = "async",
    ):
        super().__init__(vocab, weight, validate)
        if vocab.multi_digit:
            raise ValueError(
                f"{self.name}: the vocabulary {vocab.name or '<unnamed>'} writes numbers in multi-digit tokens; "
                "NTIL scores the digits of a number one token each (use del, ntl_was or smmd)"
            )
        for key, value in (("digit_exp", digit_exp), ("tau", tau)):
            if not value > 0:
                raise ValueError(f"{self.name}: {key} must be > 0, got {value}")
        for key, value in (("digit_alpha", digit_alpha), ("abs_alpha", abs_alpha), ("mag_alpha", mag_alpha)):
            if not value >= 0:
                raise ValueError(f"{self.name}: {key} must be >= 0, got {value}")
        if not noise_scale >= 0:
            raise ValueError(f"{self.name}: noise_scale must be >= 0, got {noise_scale}")
        self.weights = NTILWeights(float(digit_exp), float(digit_alpha), float(abs_alpha), float(mag_alpha))
        self.noise_scale, self.tau, self.seed = float(noise_scale), float(tau), int(seed)
        # The noise stream: a key of (seed, step) and the calls of the step, as int64 buffers.
        self.register_buffer("noise_base", torch.zeros((), dtype=torch.long), persistent=False)
        self.register_buffer("noise_calls", torch.zeros((), dtype=torch.long), persistent=False)
        self._measuring, self._calls_before = False, torch.zeros((), dtype=torch.long)
        self._totals: Optional[torch.Tensor] = None
        self.set_step(0)

    def set_step(self, step: int) -> None:
        """Start the noise stream of optimizer step ``step``."""
        base = _mix32(torch.tensor((self.seed * 0x85EBCA6B + int(step)) & _MASK32))
        self.noise_base.fill_(int(base))
        self.noise_calls.zero_()

    def begin_step_totals(self) -> None:
        """The next calls report ``aux = sum_s T_s`` of their sequences (the step's pre-pass)."""
        self._measuring, self._calls_before, self._totals = True, self.noise_calls.clone(), None

    def set_step_totals(self, totals: Optional[torch.Tensor]) -> None:
        """``(CE, sum_s T_s)`` of the step's global batch; the noise stream restarts where the
        pre-pass began, so that the step draws the noise the totals were measured with."""
        if self._measuring:
            self.noise_calls.copy_(self._calls_before)
        self._measuring, self._totals = False, totals

    def _noise(self, like: torch.Tensor, positions: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """[N, 10] scaled Gumbel noise for this call (at ``positions`` of the whole batch under
        sequence parallelism or compaction), or None at ``noise_scale`` 0."""
        if self.noise_scale == 0:
            return None
        key = (self.noise_base + self.noise_calls * 0x632BE5AB) & _MASK32
        self.noise_calls.add_(1)
        return gumbel_noise(like, key.to(like.device), self.noise_scale, positions)

    def digit_part(self, batch: Batch) -> torch.Tensor:
        layout = batch.number_runs(False, self.sequence_shard)
        logits = batch.digit_logits
        return ntil_sequence_terms(logits, layout, self.weights, self._noise(logits, layout.positions), self.tau)

    def weighted_aux(self, batch: Batch, term_sum: torch.Tensor, digit_norm, ce: torch.Tensor) -> torch.Tensor:
        """``lambda (CE / (term + 1e-10)).detach() term`` (term: the mean of T_s over the
        sequences). With the step's totals (``CE_g``, ``S_g = sum_s T_s`` over the global batch,
        :mod:`del_core.losses.step_totals`): ``lambda CE_g S / (S_g + 1e-10)`` with S this call's
        sum, so that the calls of a step add up to the one-batch loss and gradient. Without them:
        this call's own CE and term (one call over the whole batch is the released loss)."""
        if self._measuring:
            return term_sum
        if self._totals is not None:
            totals = self._totals.to(device=term_sum.device, dtype=term_sum.dtype)
            return self.weight * totals[0] * term_sum / (totals[1] + RATIO_EPS)
        term = term_sum / max(batch.rows, 1)
        return self.weight * (ce / (term + RATIO_EPS)).detach() * term
