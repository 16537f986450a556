"""The catalog of losses: DEL and its baselines behind one interface, selected by name with :func:`build_loss`."""

from __future__ import annotations

import copy
from typing import Optional, Union

import torch
import torch.nn.functional as F

from ..vocab import DigitVocab
from .base import Batch, DigitAuxLoss, LossNeeds, NumericLoss
from .digit_terms import del_term, dist2_term, leading_place_scale, ntl_mse_term, ntl_was_term
from .ntil import NTIL_DEFAULT_WEIGHT, NTILLoss
from .number_level import NumberLevelLoss
from .smmd import SMMDLoss
from .statistics import VocabSlice
from .token_terms import emo_from_ce, mixce_from_ce

# Default lambda of DEL: the effective weight of the released Qwen2.5-1.5B run (DEL_SPEC.md s.3).
DEL_DEFAULT_WEIGHT = 0.128
# ntloss's recommended lambda for NTL.
NTL_DEFAULT_WEIGHT = 0.3
# The spec gives no lambda for DIST2Loss; 0.1 is this project's choice. Set it explicitly.
DIST2_DEFAULT_WEIGHT = 0.1
# The released SMMD module is the bare term, added by its user with no lambda: 1.0 is this
# project's choice. Set it explicitly, or use weight=auto.
SMMD_DEFAULT_WEIGHT = 1.0


class MLELoss(NumericLoss):
    """Token cross-entropy alone."""

    name = "mle"


class MixCELoss(NumericLoss):
    """MixCE (Zhang et al., 2023): ``-(eta + (1 - eta) * detach(p_t)) * log p_t`` per token."""

    name = "mixce"

    def __init__(self, vocab: Optional[DigitVocab], eta: float = 0.5, validate: Union[bool, str] = "async"):
        super().__init__(vocab, 0.0, validate)
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"mixce: eta must lie in [0, 1], got {eta}")
        self.eta = float(eta)

    def token_part(self, batch: Batch, ce: torch.Tensor) -> torch.Tensor:
        return mixce_from_ce(ce, self.eta)


class EMOLoss(NumericLoss):
    """EMO (Ren et al., 2024) with a frozen cost embedding: a copy of the LM-head weight [V, H]
    taken at the start of training. Rows are L2-normalised here, once, in fp32."""

    name = "emo"
    needs = LossNeeds(head_weight_as="cost_embedding")

    def __init__(self, vocab: Optional[DigitVocab], cost_embedding: torch.Tensor, validate: Union[bool, str] = "async"):
        super().__init__(vocab, 0.0, validate)
        if cost_embedding is None or cost_embedding.dim() != 2:
            raise ValueError("emo: cost_embedding must be the LM-head weight, a [V, H] tensor")
        if not bool(torch.isfinite(cost_embedding).all()):
            raise ValueError("emo: cost_embedding holds NaN/inf values")
        embedding = F.normalize(
            cost_embedding.detach().to(torch.promote_types(cost_embedding.dtype, torch.float32)), dim=-1
        )
        self.register_buffer("cost_embedding", embedding, persistent=False)

    def cost_embedding_rows(self) -> torch.Tensor:
        return self.cost_embedding

    def for_vocab_slice(self, vocab_slice: VocabSlice) -> EMOLoss:
        """A copy holding the normalised rows ``[start, end)`` only (the statistics would otherwise
        slice the full [V, H] copy on every call, and every rank would hold all V rows)."""
        if self.cost_embedding.shape[0] != vocab_slice.vocab_size:
            raise ValueError(
                f"emo: the cost embedding has {self.cost_embedding.shape[0]} rows, the vocabulary "
                f"{vocab_slice.vocab_size}: slice a full-vocabulary loss"
            )
        shard = copy.copy(self)
        # A module's buffers live in a dict that copy.copy shares: give the copy its own.
        shard._buffers = dict(self._buffers)
        shard.cost_embedding = self.cost_embedding[vocab_slice.start : vocab_slice.end].clone()
        return shard

    def token_part(self, batch: Batch, ce: torch.Tensor) -> torch.Tensor:
        stats = batch.stats
        return emo_from_ce(ce, stats.expected, stats.target_embedding, batch.valid)


class DELLoss(DigitAuxLoss):
    """Digit Entropy Loss (DEL_SPEC.md section 3)."""

    name = "del"

    def digit_part(self, batch: Batch) -> torch.Tensor:
        place_value = batch.spans.place_value
        return batch.by_width(lambda z, y, _w: del_term(z, y, place_value))


class NTLWASLoss(DigitAuxLoss):
    """Number Token Loss, Wasserstein variant (Zausinger et al., 2025)."""

    name = "ntl_was"

    def digit_part(self, batch: Batch) -> torch.Tensor:
        return batch.by_width(lambda z, y, w: ntl_was_term(z, y, leading_place_scale(w)))


class NTLMSELoss(DigitAuxLoss):
    """Number Token Loss, squared-error variant."""

    name = "ntl_mse"

    def digit_part(self, batch: Batch) -> torch.Tensor:
        return batch.by_width(lambda z, y, w: ntl_mse_term(z, y, leading_place_scale(w)))


class DIST2Loss(DigitAuxLoss):
    """DIST2Loss (Chung et al., 2026); ``place_weighted`` multiplies each term by the integer place
    k (units 1, tens 2, ...; fractional digits counted as a separate integer), the DEL authors'
    variant, off by default."""

    name = "dist2"

    def __init__(
        self,
        vocab: DigitVocab,
        weight: float,
        tau: float = 1.0,
        place_weighted: bool = False,
        validate: Union[bool, str] = "async",
    ):
        super().__init__(vocab, weight, validate)
        if tau <= 0:
            raise ValueError(f"dist2: tau must be > 0, got {tau}")
        self.tau = float(tau)
        self.place_weighted = bool(place_weighted)

    def digit_part(self, batch: Batch) -> torch.Tensor:
        tau = self.tau
        term = batch.by_width(lambda z, y, _w: dist2_term(z, y, tau))
        if self.place_weighted:
            term = term * batch.spans.place_index.to(term.dtype)
        return term


_LOSSES = {
    "mle": (MLELoss, None),
    "mixce": (MixCELoss, None),
    "emo": (EMOLoss, None),
    "ntl_was": (NTLWASLoss, NTL_DEFAULT_WEIGHT),
    "ntl_mse": (NTLMSELoss, NTL_DEFAULT_WEIGHT),
    "dist2": (DIST2Loss, DIST2_DEFAULT_WEIGHT),
    "del": (DELLoss, DEL_DEFAULT_WEIGHT),
    "number_level": (NumberLevelLoss, NTL_DEFAULT_WEIGHT),
    "smmd": (SMMDLoss, SMMD_DEFAULT_WEIGHT),
    "ntil": (NTILLoss, NTIL_DEFAULT_WEIGHT),
}
LOSS_NAMES = tuple(_LOSSES)
WEIGHTED_LOSSES = tuple(name for name, (_, default_weight) in _LOSSES.items() if default_weight is not None)


class NoWeightError(TypeError):
    """A lambda given to a loss that has none (MLE, MixCE, EMO): the one place this rule is checked."""


def loss_class(name: str) -> type[NumericLoss]:
    """The class of the loss ``name`` (as :func:`loss_name` reads it)."""
    return _LOSSES[loss_name(name)][0]


def loss_name(name: str) -> str:
    """``name`` as one of :data:`LOSS_NAMES` (case-insensitive, ``-`` = ``_``: ``NTL-WAS`` is
    ``ntl_was``); ValueError naming the choices for any other name."""
    key = name.lower().replace("-", "_")
    if key not in _LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {', '.join(LOSS_NAMES)}")
    return key


def build_loss(name: str, vocab: Optional[DigitVocab], weight: Optional[float] = None, **options) -> NumericLoss:
    """Build a loss by name: one of ``mle mixce emo ntl_was ntl_mse dist2 del number_level smmd ntil``.

    ``weight`` is lambda (DEL, NTL, DIST2, number_level, SMMD, NTIL; defaults 0.128, 0.3, 0.1,
    0.3, 1.0, 0.3). Other options by loss: ``eta`` (mixce, 0.5), ``cost_embedding`` (emo,
    required), ``tau`` and ``place_weighted`` (dist2), ``float_level`` and ``reweigh``
    (number_level), ``max_value``, ``kernel``, ``sigmas``, ``squash_factor``, ``alpha`` and
    ``mode`` (smmd), ``digit_exp``, ``digit_alpha``, ``abs_alpha``, ``mag_alpha``,
    ``noise_scale``, ``tau`` and ``seed`` (ntil), ``validate`` (all: ``"async"`` device-side
    checks, the default; ``"sync"`` checks that name positions; ``"off"``; see
    :class:`NumericLoss`). ``vocab`` may be None for mle/mixce/emo (then no digit metrics are
    reported).
    """
    key = loss_name(name)
    cls, default_weight = _LOSSES[key]
    option = cls.needs.head_weight_as
    if option is not None and options.get(option) is None:
        raise TypeError(f"loss {key!r} needs {option}=<the LM-head weight [V, H] at the start of training>")
    if default_weight is None:
        if weight is not None:
            raise NoWeightError(f"loss {key!r} has no weight lambda (MixCE takes eta=, EMO has none)")
        return cls(vocab, **options)
    return cls(vocab, default_weight if weight is None else weight, **options)
