"""Teacher-forced held-out metrics: how the model scores the reference answers, token by token.

Per batch, :func:`teacher_forced_sums` returns named sums (divide only after summing over batches
and ranks, :func:`summarise`):
  ce_sum        cross-entropy (nats) summed over target tokens       tokens   target tokens
  digit_hits    number-token targets whose argmax within their width group is right (the ten
                digits on a single-digit vocabulary; docs/number_tokens.md)
  entropy_sum   entropy (nats) of that group's distribution, summed over number-token targets
  digits        number-token targets
  right_numbers numbers (maximal digit/point spans) with every digit argmax-right
  numbers       numbers
  answer_hits   sequences whose stated answer comes out right (:func:`answer_hits`)
  answers       sequences with at least one target (blank padding rows are not answers)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import torch

from del_core.losses.digit_terms import number_entropy, number_hits
from del_core.spans import IGNORE_INDEX, NumberSpans, number_spans
from del_core.vocab import DigitVocab

TEACHER_FORCED_SUMS = (
    "ce_sum",
    "tokens",
    "digit_hits",
    "entropy_sum",
    "digits",
    "right_numbers",
    "numbers",
    "answer_hits",
    "answers",
)


@dataclass
class TeacherForcedMetrics:
    """Means over a whole held-out set (0 where a denominator is 0)."""

    ce: float  # nats per target token
    digit_acc: float
    digit_entropy: float  # nats
    number_acc: float
    tokens: float
    digits: float
    numbers: float
    tf_answer_acc: float  # share of sequences whose last number is right (:func:`answer_hits`)
    answers: float


@dataclass
class BatchScores:
    """One batch's :data:`TEACHER_FORCED_SUMS` (float64 scalars) and ``hits`` (bool [B], the
    :func:`answer_hits` of each sequence; all False without a vocabulary)."""

    sums: dict[str, torch.Tensor]
    hits: torch.Tensor


def _number_sums(digit_logits: torch.Tensor, spans: NumberSpans, vocab: DigitVocab) -> dict[str, torch.Tensor]:
    """``digit_logits`` [..., C] the number-token logits, ``spans`` of the same leading shape."""
    flat = digit_logits.reshape(-1, digit_logits.shape[-1])
    width, value = spans.width.reshape(-1), spans.digit_value.reshape(-1)
    entropy = number_entropy(flat, width, vocab.group_offsets).reshape(spans.width.shape)
    right = number_hits(flat, width, value, vocab.group_offsets).reshape(spans.width.shape)
    wrong_digit = spans.is_digit & ~right
    span_id = spans.span_start.reshape(-1).long().cumsum(0) - 1  # spans never cross sequences
    in_span = (spans.is_digit | spans.is_point).reshape(-1)
    n_spans = spans.span_start.sum()
    # One slot per position bounds the number of spans without reading n_spans on the host.
    wrong_span = torch.zeros(in_span.numel() + 1, dtype=torch.long, device=digit_logits.device)
    wrong_span.index_add_(0, span_id[in_span].clamp_min(0), wrong_digit.reshape(-1)[in_span].long())
    first_free = torch.arange(wrong_span.numel(), device=digit_logits.device) < n_spans
    return {
        "digit_hits": (right & spans.is_digit).sum().double(),
        "entropy_sum": entropy[spans.is_digit].double().sum(),
        "digits": spans.is_digit.sum().double(),
        "right_numbers": ((wrong_span == 0) & first_free).sum().double(),
        "numbers": n_spans.double(),
    }


@torch.no_grad()
def score_batch(
    logits: torch.Tensor, targets: torch.Tensor, vocab: Optional[DigitVocab], spans: Optional[NumberSpans] = None
) -> BatchScores:
    """:class:`BatchScores` of one batch, on the logits' device.

    ``logits`` [B, T, V], ``targets`` [B, T] aligned (-100 ignored); ``spans`` the targets' number
    spans when the caller has them (computed here otherwise). Without a vocabulary the digit,
    number and answer-hit sums are 0.
    """
    logits = logits.float()
    valid = targets != IGNORE_INDEX
    # One tensor per name: a caller adding in place into one sum must not change the others.
    sums = {name: torch.zeros((), dtype=torch.float64, device=logits.device) for name in TEACHER_FORCED_SUMS}
    sums["ce_sum"] = torch.nn.functional.cross_entropy(logits[valid], targets[valid], reduction="sum").double()
    sums["tokens"] = valid.sum().double()
    sums["answers"] = valid.any(-1).sum().double()
    hits = torch.zeros(targets.shape[0], dtype=torch.bool, device=logits.device)
    if vocab is None:
        return BatchScores(sums, hits)
    spans = spans if spans is not None else number_spans(targets, vocab)
    digit_logits = logits[..., vocab.number_tensor(logits.device)]
    sums.update(_number_sums(digit_logits, spans, vocab))
    hits = answer_hits(logits, targets, spans, vocab)
    sums["answer_hits"] = hits.sum().double()
    return BatchScores(sums, hits)


def teacher_forced_sums(
    logits: torch.Tensor, targets: torch.Tensor, vocab: Optional[DigitVocab], spans: Optional[NumberSpans] = None
) -> dict[str, torch.Tensor]:
    """The named sums of :func:`score_batch` alone."""
    return score_batch(logits, targets, vocab, spans).sums


def summarise(sums: Mapping[str, float]) -> TeacherForcedMetrics:
    """The means of summed :func:`teacher_forced_sums` (over batches and ranks)."""
    return TeacherForcedMetrics(
        ce=sums["ce_sum"] / max(sums["tokens"], 1),
        digit_acc=sums["digit_hits"] / max(sums["digits"], 1),
        digit_entropy=sums["entropy_sum"] / max(sums["digits"], 1),
        number_acc=sums["right_numbers"] / max(sums["numbers"], 1),
        tokens=sums["tokens"],
        digits=sums["digits"],
        numbers=sums["numbers"],
        tf_answer_acc=sums["answer_hits"] / max(sums["answers"], 1),
        answers=sums["answers"],
    )


@torch.no_grad()
def answer_hits(logits: torch.Tensor, targets: torch.Tensor, spans: NumberSpans, vocab: DigitVocab) -> torch.Tensor:
    """bool [B]: whether each sequence's stated answer comes out right under teacher forcing.

    The answer is the sequence's last number span ("The answer is 39." -> "39", "= 2.5" -> "2.5").
    It is right when, given the reference prefix, the full-vocabulary argmax equals the target at
    every position of the span up to its last number token (what greedy decoding would write), and
    the number ends there: at the next position the argmax is the target or any token that is not
    a number token or the point ("390" and "39.5" are not "39"; "39\n" and "39." are). A sequence
    without a number token is not right.

    ``logits`` [B, T, V], ``targets`` [B, T] aligned (-100 ignored), ``spans`` the targets' spans
    under ``vocab``.
    """
    in_span = spans.is_digit | spans.is_point
    starts = spans.span_start.long()
    later_starts = starts.flip(-1).cumsum(-1).flip(-1) - starts  # span starts strictly after t
    in_last = in_span & (later_starts == 0)
    position = torch.arange(targets.shape[-1], device=targets.device)
    last_digit = torch.where(in_last & spans.is_digit, position, -1).amax(-1, keepdim=True)
    predicted = logits.argmax(-1)
    numeric = torch.cat([vocab.number_tensor(logits.device), torch.tensor([vocab.point_id], device=logits.device)])
    continues = torch.isin(predicted, numeric) & (predicted != targets)
    wrong_inside = in_last & (position <= last_digit) & (predicted != targets)
    wrong_end = (position == last_digit + 1) & (targets != IGNORE_INDEX) & continues
    return (last_digit.squeeze(-1) >= 0) & ~(wrong_inside | wrong_end).any(-1)
