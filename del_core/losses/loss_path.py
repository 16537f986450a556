"""Where a loss reads the model's scores: its logits, or its last hidden states chunk by chunk.

Two paths, one name each (:data:`LOSS_PATHS`):

* ``"logits"``: the model's logits [..., T, V] go to ``loss(logits, targets, ...)``;
* ``"chunked"``: the last hidden states [..., T, H] (the LM head's input) and the LM-head weight
  [V or V_local, H] go to ``loss.from_hidden``, ``chunk_size`` tokens at a time, so the [N, V]
  logits are never held whole.

:func:`loss_on_path` is the one place that branches between them; the training objective and the
Hugging Face Trainer adapter both call it after running their model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import torch

from ..spans import NumberSpans
from .base import LossOutput, Normaliser, NumericLoss
from .statistics import VocabSlice

LOSS_PATHS = ("logits", "chunked")


def loss_path_name(value: str, setting: str = "loss_path") -> str:
    """``value`` when it is one of :data:`LOSS_PATHS`; ValueError naming ``setting`` (the option as
    the caller spells it) otherwise."""
    if value not in LOSS_PATHS:
        raise ValueError(
            f"{setting}={value!r}: choose 'logits' (the model's logits) or 'chunked' (from the last hidden "
            "states and the LM-head weight, chunk by chunk)"
        )
    return value


@dataclass(frozen=True)
class LossCalls:
    """The calls of one loss, one per path of :data:`LOSS_PATHS`: ``logits`` (``NumericLoss.forward``)
    and ``chunked`` (``NumericLoss.from_hidden``), or compiled forms of them with the same signatures."""

    logits: Callable[..., LossOutput]
    chunked: Callable[..., LossOutput]

    @classmethod
    def of(cls, loss: NumericLoss) -> LossCalls:
        return cls(loss.forward, loss.from_hidden)


def loss_on_path(
    path: str,
    calls: LossCalls,
    source: torch.Tensor,
    targets: torch.Tensor,
    num_tokens: Normaliser = None,
    num_digits: Normaliser = None,
    *,
    head_weight: Optional[torch.Tensor] = None,
    chunk_size: int = 256,
    num_chunks: Optional[int] = None,
    vocab_slice: Optional[VocabSlice] = None,
    spans: Optional[NumberSpans] = None,
) -> LossOutput:
    """The loss of ``targets`` [..., T] (aligned, -100 ignored) on ``path`` (one of :data:`LOSS_PATHS`).

    ``source``: the logits [..., T, V or V_local] on ``"logits"``; the last hidden states
    [..., T, H] on ``"chunked"``, scored against ``head_weight`` [V or V_local, H] ``chunk_size``
    tokens at a time (or in ``num_chunks`` chunks, see ``NumericLoss.from_hidden``).
    ``num_tokens``/``num_digits``: the global normalisers; ``vocab_slice``: this process's
    vocabulary columns under tensor parallelism; ``spans``: the targets' number spans if known.
    """
    if path == "logits":
        return calls.logits(source, targets, num_tokens, num_digits, vocab_slice=vocab_slice, spans=spans)
    if path != "chunked":
        raise ValueError(f"unknown loss path {path!r}; choose one of {', '.join(LOSS_PATHS)}")
    if head_weight is None:
        raise ValueError("the chunked loss path needs the LM-head weight [V, H]")
    return calls.chunked(
        source,
        head_weight,
        targets,
        num_tokens,
        num_digits,
        vocab_slice=vocab_slice,
        chunk_size=chunk_size,
        spans=spans,
        num_chunks=num_chunks,
    )
