"""Building a loss for a model: what the loss needs (its :class:`LossNeeds`) is supplied here.

    loss = build_loss_for_model("emo", vocab, head_weight=lambda: lm.get_output_embeddings().weight)
    loss = loss.for_vocab_slice(vocab_slice)   # under tensor parallelism, after the head is sharded

The caller passes what it can provide; the loss class declares what it takes. ``head_weight`` is a
call, made only when the loss needs the LM-head weight, so a trainer gathers a partitioned weight
(ZeRO-3) only for such a loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from ..vocab import DigitVocab
from .base import LossNeeds, NumericLoss, missing_vocab_message
from .catalog import build_loss, loss_class

HeadWeight = Callable[[], torch.Tensor]


def loss_needs(name: str) -> LossNeeds:
    """What the loss ``name`` needs from the model and tokenizer (unknown names raise ValueError)."""
    return loss_class(name).needs


def build_loss_for_model(
    name: str,
    vocab: Optional[DigitVocab],
    weight: Optional[float] = None,
    *,
    head_weight: Optional[HeadWeight] = None,
    **options,
) -> NumericLoss:
    """``build_loss(name, vocab, weight, **options)`` with the loss's needs supplied.

    ``head_weight``: a call returning the LM-head weight [V, H] with its values (under ZeRO-3:
    gathered, and a copy, since the values must outlive the call); called once, only when the loss
    needs it (``LossNeeds.head_weight_as``) and ``options`` do not already give that option. The
    loss keeps its own normalised copy, so the model's weight may change afterwards.
    Raises ValueError for a loss that needs a vocabulary when ``vocab`` is None, and TypeError
    when it needs the head weight and ``head_weight`` is None.
    """
    needs = loss_needs(name)
    if needs.vocab and vocab is None:
        raise ValueError(missing_vocab_message(name))
    option = needs.head_weight_as
    if option is not None and options.get(option) is None:
        if head_weight is None:
            raise TypeError(
                f"loss {name!r} needs the LM-head weight: pass head_weight=<a call returning the [V, H] weight> "
                f"or {option}=<the weight>"
            )
        options[option] = head_weight()
    return build_loss(name, vocab, weight, **options)
