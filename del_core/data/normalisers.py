"""The loss's normalisers, counted once for both trainers.

A del_core loss divides its sums by ``num_tokens`` (the non-ignored targets) and ``num_digits``
(the number-token targets) of the whole optimizer step on all data-parallel ranks. Both the
trainer (:class:`del_core.data.tokenized.TokenBatch.counts`, summed by
:func:`del_core.training.step_metrics.step_counts`) and the Trainer adapter
(:mod:`del_core.integrations.counting`) count each micro-batch with :func:`target_counts`, then sum
the counts over the step's micro-batches and over the ranks with their own collective. Nothing here
reads a tensor back to the host.
"""

from __future__ import annotations

from typing import Optional

import torch

from del_core.spans import IGNORE_INDEX, NumberSpans, number_spans
from del_core.vocab import DigitVocab


def target_counts(
    targets: torch.Tensor, vocab: Optional[DigitVocab] = None, spans: Optional[NumberSpans] = None
) -> torch.Tensor:
    """[2] int64 on the targets' device: ``[non-ignored targets, number-token targets]`` of
    ``targets`` [..., T] (aligned, -100 ignored). The number tokens are those of ``spans`` when
    given (the targets' spans, e.g. computed on the whole sequences before a sequence-parallel
    cut), else of ``number_spans(targets, vocab)``; 0 with neither."""
    tokens = (targets != IGNORE_INDEX).sum()
    if spans is None and vocab is not None:
        spans = number_spans(targets, vocab)
    digits = spans.is_digit.sum().to(tokens.dtype) if spans is not None else torch.zeros_like(tokens)
    return torch.stack([tokens, digits])
