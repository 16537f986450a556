"""The loss set-up every way in shares: which loss, its lambda (a number, ``"auto"`` or the loss's
default) and its options, checked once and built once.

    spec = LossSpec("del", weight="auto")          # checked here: name, weight, options
    loss = spec.build(vocab, head_weight=...)      # lambda = AUTO_PLACEHOLDER until measured
    loss.set_weight(measure_auto_weight(...).weight)

The training recipe's ``loss`` section is this record (``del_core.training.config.LossConfig`` adds
how the trainer runs it), and so are ``DELTrainer``'s ``loss=`` / ``loss_weight=`` arguments. A bad
value is a :class:`LossSpecError` whose message names the key as the way in writes it
(:class:`KeySpelling`): ``loss.weight=auto`` in a recipe, ``loss_weight='auto'`` in Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch

from ..vocab import DigitVocab
from .auto_weight import AUTO_PLACEHOLDER, DEFAULT_AUTO_RATIO
from .base import LossNeeds, NumericLoss
from .catalog import LOSS_NAMES, NoWeightError, loss_name
from .model_needs import HeadWeight, build_loss_for_model, loss_needs

AUTO = "auto"  # the weight measured on the first batch (del_core.losses.auto_weight)


@dataclass(frozen=True)
class KeySpelling:
    """How a way in writes the keys of a :class:`LossSpec` and their values, for its messages:
    the key of field ``f`` is ``prefix + renamed.get(f, f)``; ``literal`` writes a value (``str``
    in a recipe, ``repr`` in Python); ``unset`` is how "no value" is written."""

    prefix: str = ""
    renamed: Mapping[str, str] = field(default_factory=dict)
    literal: Callable[[Any], str] = repr
    unset: str = "None"

    def key(self, name: str) -> str:
        return self.prefix + self.renamed.get(name, name)


FIELD_SPELLING = KeySpelling()  # LossSpec(...) itself: the field names
# A ``loss`` section of a recipe or a command line (``loss.weight=auto``).
DOTTED_SPELLING = KeySpelling(prefix="loss.", literal=str, unset="empty")
Message = Callable[[KeySpelling], str]


class LossSpecError(ValueError):
    """A bad loss set-up, in one line naming the key (spelt by :data:`FIELD_SPELLING` until a way
    in re-spells it with :meth:`respelt`)."""

    def __init__(self, message: Message, spelling: KeySpelling = FIELD_SPELLING):
        super().__init__(message(spelling))
        self.message = message

    def respelt(self, spelling: KeySpelling) -> LossSpecError:
        """The same error with the keys as ``spelling`` writes them."""
        return LossSpecError(self.message, spelling)


@dataclass
class LossSpec:
    """One loss set-up; checked when made (:class:`LossSpecError`), the name normalised
    (``NTL-WAS`` is ``ntl_was``).

    ``weight``: lambda of a weighted loss (DEL, NTL, DIST2): a number >= 0, ``"auto"`` (measured on
    the first batch, :mod:`del_core.losses.auto_weight`, with ``auto_ratio``) or None (the loss's
    default, del 0.128). ``options``: the loss's other constructor options (``eta`` for mixce,
    ``tau`` / ``place_weighted`` for dist2, ``validate``), checked by building the loss on a
    stand-in vocabulary."""

    name: str = "del"  # mle mixce emo ntl_was ntl_mse dist2 del number_level smmd ntil
    # lambda; None = the loss's default (del 0.128); auto = from the first batch (auto_ratio below)
    weight: Optional[Union[float, str]] = None
    auto_ratio: float = DEFAULT_AUTO_RATIO  # weight=auto: lambda x digit term / CE on the first step's batch
    options: dict[str, Any] = field(default_factory=dict)  # eta (mixce), tau / place_weighted (dist2)

    def __post_init__(self) -> None:
        for check in (self._check_name, self._check_auto_ratio, self._check_weight, self._check_build):
            problem = check()
            if problem is not None:
                raise LossSpecError(problem)

    @property
    def is_auto(self) -> bool:
        """Whether lambda is measured on the first batch (``weight="auto"``)."""
        return self.weight == AUTO

    @property
    def initial_weight(self) -> Optional[float]:
        """The weight the loss is built with: :data:`AUTO_PLACEHOLDER` for ``"auto"`` (until the
        measured lambda is set with :meth:`NumericLoss.set_weight`), else ``weight``."""
        return AUTO_PLACEHOLDER if self.is_auto else self.weight

    @property
    def needs(self) -> LossNeeds:
        """What the loss needs from the model and the tokenizer."""
        return loss_needs(self.name)

    def build(self, vocab: Optional[DigitVocab], head_weight: Optional[HeadWeight] = None) -> NumericLoss:
        """The loss, with :attr:`initial_weight` and the options; ``head_weight``: a call returning a
        copy of the LM-head weight [V, H], made only for a loss that needs it
        (:func:`del_core.losses.build_loss_for_model`, :func:`del_core.losses.head_weight_copy`)."""
        return build_loss_for_model(self.name, vocab, self.initial_weight, head_weight=head_weight, **self.options)

    # --- the checks: each None, or the message of its problem ------------------------------------
    def _check_name(self) -> Optional[Message]:
        name = self.name
        try:
            self.name = loss_name(name)
        except (AttributeError, ValueError):
            return lambda s: f"{s.key('name')} must be one of {', '.join(LOSS_NAMES)}, got {name!r}"
        return None

    def _check_auto_ratio(self) -> Optional[Message]:
        ratio = self.auto_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            return lambda s: f"{s.key('auto_ratio')} must be > 0, got {ratio}"
        return None

    def _check_weight(self) -> Optional[Message]:
        weight = self.weight
        number = isinstance(weight, (int, float)) and not isinstance(weight, bool)
        if not (weight is None or number or weight == AUTO):
            return lambda s: f"{s.key('weight')} must be a number, {s.literal(AUTO)} or {s.unset}, got {weight!r}"
        if number and not weight >= 0:
            return lambda s: f"{s.key('weight')} must be >= 0, got {weight}"
        if number and not math.isfinite(weight):
            return lambda s: f"{s.key('weight')} must be a finite number, got {weight}"
        return None

    def _check_build(self) -> Optional[Message]:
        """The loss builds with its weight and options (the catalog's rule that MLE, MixCE and EMO
        take no lambda, and the loss's own checks: mixce's eta in [0, 1], dist2's tau > 0, no
        unknown option) on a stand-in vocabulary of ten digits, before any model loads."""
        options, name, weight = self.options, self.name, self.weight
        if not isinstance(options, Mapping):
            return lambda s: f"{s.key('options')} must be a mapping of option names to values, got {options!r}"
        stand_in = DigitVocab(digit_ids=tuple(range(10)), point_id=10, name="the configuration check")
        try:
            build_loss_for_model(name, stand_in, self.initial_weight, head_weight=lambda: torch.ones(11, 1), **options)
        except NoWeightError:
            return lambda s: f"{s.key('weight')}={s.literal(weight)}: loss {s.literal(name)} has no weight lambda"
        except (TypeError, ValueError) as err:
            reason = str(err)
            return lambda s: f"loss {s.literal(name)} with {s.key('options')} {dict(options)}: {reason}"
        return None
