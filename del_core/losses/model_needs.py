"""Building a loss for a model: what the loss needs (its :class:`LossNeeds`) is supplied here.

    loss = build_loss_for_model("emo", vocab, head_weight=lambda: lm.get_output_embeddings().weight)
    loss = loss.for_vocab_slice(vocab_slice)   # under tensor parallelism, after the head is sharded

The caller passes what it can provide; the loss class declares what it takes. ``head_weight`` is a
call, made only when the loss needs the LM-head weight, so a trainer gathers a partitioned weight
(ZeRO-3) only for such a loss; :func:`head_weight_copy` is that call for both trainers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Optional

import torch

from ..vocab import DigitVocab
from .base import LossNeeds, NumericLoss, missing_vocab_message
from .catalog import build_loss, loss_class

HeadWeight = Callable[[], torch.Tensor]
# A context in which partitioned parameters hold their full values (ZeRO-3's gathering).
Gathering = Callable[[list[torch.nn.Parameter]], AbstractContextManager[None]]


def head_weight_copy(
    model: torch.nn.Module, device: Optional[torch.device] = None, gathered: Optional[Gathering] = None
) -> torch.Tensor:
    """A detached copy of ``model``'s LM-head weight [V, H] in its dtype, on ``device`` (default:
    where the weight is), for a loss that keeps one (:class:`LossNeeds`: EMO's cost embedding).

    ``gathered``: the context in which a partitioned weight holds its values (the DeepSpeed
    trainer's ZeRO-3 gathering, a collective); without it a partitioned weight is refused, since it
    holds no values outside its module's forward. ValueError when the model has no such weight."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    context = gathered([weight]) if gathered is not None and weight is not None else contextlib.nullcontext()
    with context:
        if weight is None or weight.dim() != 2 or weight.numel() == 0:
            raise ValueError(
                f"the LM-head weight of {type(model).__name__} is absent or partitioned (ZeRO-3) where the loss is "
                "built; pass a loss built with the gathered [V, H] weight"
            )
        return weight.detach().to(device or weight.device, copy=True)


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
        try:
            options[option] = head_weight()
        except ValueError as err:
            raise ValueError(f"loss {name!r} needs the LM-head weight as {option}: {err}") from None
    return build_loss(name, vocab, weight, **options)
