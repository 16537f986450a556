"""The del_core loss of a Trainer: given ready-made, or built by name with the tokenizer's digits."""

from __future__ import annotations

import functools
from typing import Any, Optional, Union

import torch

from del_core.losses import WEIGHTED_LOSSES, NumericLoss, build_loss_for_model, loss_needs
from del_core.vocab import DigitVocab


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


def head_weight_copy(model: torch.nn.Module, loss: str) -> torch.Tensor:
    """A detached copy of the LM-head weight [V, H] for the loss ``loss`` (EMO's cost embedding);
    refuses a weight that ZeRO-3 has partitioned (it holds no values outside the module's forward)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is None or weight.dim() != 2 or weight.numel() == 0:
        option = loss_needs(loss).head_weight_as
        raise ValueError(
            f"loss={loss!r} needs the LM-head weight, and this model's is absent or partitioned (ZeRO-3); pass "
            f"loss=del_core.build_loss({loss!r}, vocab, {option}=<the gathered [V, H] LM-head weight>)"
        )
    return weight.detach().clone()


AUTO_PLACEHOLDER = 1.0  # lambda of loss_weight="auto" until the first batch has been measured


def is_auto_weight(weight: Union[float, str, None]) -> bool:
    """Whether ``weight`` is ``"auto"``; ValueError for any other text."""
    if isinstance(weight, str) and weight != "auto":
        raise ValueError(f"loss_weight must be a number, 'auto' or None, got {weight!r}")
    return weight == "auto"


def loss_weight_arg(text: str) -> Union[float, str]:
    """A ``--loss-weight`` command-line value: ``auto``, or a number in any spelling Python reads
    (``0.1``, ``1e-3``, ``.5``); ValueError otherwise (argparse reports it as an invalid value)."""
    return text if text == "auto" else float(text)


def resolve_loss(
    loss: Union[str, NumericLoss],
    weight: Union[float, str, None],
    options: Optional[dict],
    vocab: Optional[DigitVocab],
    processing_class: Any,
    model: torch.nn.Module,
) -> NumericLoss:
    """``loss`` itself when it is a :class:`NumericLoss` (then ``weight``/``options``/``vocab`` must
    be unset: it carries its own); else ``build_loss_for_model(loss, vocab, weight, **options)``
    with the vocabulary of :func:`digit_vocab` and a copy of the model's LM-head weight for a loss
    that needs one (EMO's cost embedding). ``weight="auto"`` builds the loss with a placeholder
    lambda that the Trainer sets on its first batch."""
    if isinstance(loss, NumericLoss):
        if weight is not None or options or vocab is not None:
            raise TypeError(
                "loss is a built NumericLoss: pass loss_weight, loss_options and vocab to build_loss instead"
            )
        return loss
    if not isinstance(loss, str):
        raise TypeError(f"loss must be a loss name or a del_core NumericLoss, got {type(loss).__name__}")
    if is_auto_weight(weight):
        if loss.lower().replace("-", "_") not in WEIGHTED_LOSSES:
            raise ValueError(f"loss_weight='auto': loss {loss!r} has no weight lambda")
        weight = AUTO_PLACEHOLDER
    head_weight = functools.partial(head_weight_copy, model, loss)
    return build_loss_for_model(
        loss, digit_vocab(vocab, processing_class), weight, head_weight=head_weight, **dict(options or {})
    )
