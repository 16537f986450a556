"""The del_core loss of a Trainer: given ready-made, or built from its :class:`LossSpec` (given, or
made from the ``loss=`` / ``loss_weight=`` / ``loss_options=`` / ``auto_ratio=`` arguments) with the
tokenizer's digits."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from del_core.losses import DEFAULT_AUTO_RATIO, KeySpelling, LossSpec, LossSpecError, NumericLoss, head_weight_copy
from del_core.vocab import DigitVocab

# The LossSpec fields as the Trainer's keyword arguments name them, for the spec's messages.
ARGUMENT_KEYS = KeySpelling(renamed={"name": "loss", "weight": "loss_weight", "options": "loss_options"})


@dataclass(frozen=True)
class TrainerLoss:
    """The loss a Trainer trains with, and the set-up it was built from (None: built by the caller)."""

    loss: NumericLoss
    spec: Optional[LossSpec]


def tokenizer_of(processing_class: Any) -> Any:
    """The tokenizer in a Trainer's ``processing_class`` (a tokenizer, or a processor holding one);
    None when there is none."""
    if processing_class is None or hasattr(processing_class, "convert_ids_to_tokens"):
        return processing_class
    return getattr(processing_class, "tokenizer", None)


def digit_vocab(vocab: Optional[DigitVocab], processing_class: Any) -> Optional[DigitVocab]:
    """``vocab`` when given, else the :class:`DigitVocab` of the Trainer's tokenizer (None without
    a tokenizer; a vocabulary the losses cannot score raises, see ``DigitVocab.from_tokenizer``)."""
    if vocab is not None:
        return vocab
    tokenizer = tokenizer_of(processing_class)
    return DigitVocab.from_tokenizer(tokenizer) if tokenizer is not None else None


def loss_spec(
    loss: Union[str, LossSpec],
    weight: Union[float, str, None] = None,
    options: Optional[dict] = None,
    auto_ratio: Optional[float] = None,
) -> LossSpec:
    """``loss`` itself when it is a :class:`LossSpec` (then ``weight``, ``options`` and ``auto_ratio``
    must be unset: it carries its own), else ``LossSpec(loss, weight, auto_ratio, options)``; a
    :class:`LossSpecError` names the argument (``loss_weight='auto': loss 'mle' has no weight lambda``)."""
    if isinstance(loss, LossSpec):
        if weight is not None or options or auto_ratio is not None:
            raise TypeError("loss is a LossSpec: give loss_weight, loss_options and auto_ratio inside it")
        return loss
    if not isinstance(loss, str):
        raise TypeError(
            f"loss must be a loss name, a del_core LossSpec or a del_core NumericLoss, got {type(loss).__name__}"
        )
    ratio = DEFAULT_AUTO_RATIO if auto_ratio is None else auto_ratio
    try:
        return LossSpec(loss, weight, ratio, dict(options or {}))
    except LossSpecError as err:
        raise err.respelt(ARGUMENT_KEYS) from None


def resolve_loss(
    loss: Union[str, LossSpec, NumericLoss],
    weight: Union[float, str, None],
    options: Optional[dict],
    auto_ratio: Optional[float],
    vocab: Optional[DigitVocab],
    processing_class: Any,
    model: torch.nn.Module,
) -> TrainerLoss:
    """``loss`` itself when it is a :class:`NumericLoss` (then the other loss arguments must be
    unset: it carries its own); else the loss of :func:`loss_spec`, built with the vocabulary of
    :func:`digit_vocab` and, for a loss that needs one, a copy of the model's LM-head weight
    (EMO's cost embedding). ``weight="auto"`` builds it with the placeholder lambda that the
    Trainer replaces on its first batch."""
    if isinstance(loss, NumericLoss):
        if weight is not None or options or auto_ratio is not None or vocab is not None:
            raise TypeError(
                "loss is a built NumericLoss: pass loss_weight, loss_options, auto_ratio and vocab to build_loss "
                "or a LossSpec instead"
            )
        return TrainerLoss(loss, None)
    spec = loss_spec(loss, weight, options, auto_ratio)
    head_weight = functools.partial(head_weight_copy, model)
    return TrainerLoss(spec.build(digit_vocab(vocab, processing_class), head_weight), spec)
