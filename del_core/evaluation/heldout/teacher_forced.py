"""Teacher-forced held-out metrics: how the model scores the reference answers, token by token.

The project's one definition of the teacher-forced metrics, used by the trainer's held-out
evaluation, the study, the numeric benchmark and the loss demo. One forward per batch and no
decoding, so it is several times cheaper per answer than greedy generation (the study's primary
metric is :func:`score_forced_answers` on hundreds of held-out answers).

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

Over a list of examples, :func:`score_examples` sums them given any ``logits_of(batch)`` (a plain
model, or a training objective gathering vocabulary shards); :func:`score_forced_answers` scores a
model on held-out rows encoded exactly as training encodes them (:func:`del_core.data.tokenized.encode`),
so a row's targets are its reference answer and its answer the last number of it ("The answer is X.").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.tokenized import Example, TokenBatch, collate, encode
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


def digit_hits(digit_logits: torch.Tensor, spans: NumberSpans, vocab: DigitVocab) -> torch.Tensor:
    """bool, the spans' shape: the number-token target at each position whose argmax within its
    width group (the ten digits on a single-digit vocabulary) is right; False off number tokens.
    ``digit_logits`` [..., C] the number-token logits (``logits[..., vocab.number_tensor()]``)."""
    flat = digit_logits.reshape(-1, digit_logits.shape[-1])
    right = number_hits(flat, spans.width.reshape(-1), spans.digit_value.reshape(-1), vocab.group_offsets)
    return right.reshape(spans.width.shape) & spans.is_digit


def _number_sums(digit_logits: torch.Tensor, spans: NumberSpans, vocab: DigitVocab) -> dict[str, torch.Tensor]:
    """``digit_logits`` [..., C] the number-token logits, ``spans`` of the same leading shape."""
    flat = digit_logits.reshape(-1, digit_logits.shape[-1])
    entropy = number_entropy(flat, spans.width.reshape(-1), vocab.group_offsets).reshape(spans.width.shape)
    right = digit_hits(digit_logits, spans, vocab)
    wrong_digit = spans.is_digit & ~right
    span_id = spans.span_start.reshape(-1).long().cumsum(0) - 1  # spans never cross sequences
    in_span = (spans.is_digit | spans.is_point).reshape(-1)
    n_spans = spans.span_start.sum()
    # One slot per position bounds the number of spans without reading n_spans on the host.
    wrong_span = torch.zeros(in_span.numel() + 1, dtype=torch.long, device=digit_logits.device)
    wrong_span.index_add_(0, span_id[in_span].clamp_min(0), wrong_digit.reshape(-1)[in_span].long())
    first_free = torch.arange(wrong_span.numel(), device=digit_logits.device) < n_spans
    return {
        "digit_hits": right.sum().double(),
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


@dataclass
class ForcedScores:
    """Teacher-forced scores of a list of examples: the named sums (:data:`TEACHER_FORCED_SUMS`,
    float64 scalars on the device, summed over batches) and each example's answer hit (bool [N], on
    the device, in the examples' order; no host sync per batch)."""

    sums: dict[str, torch.Tensor]
    hits: torch.Tensor


@torch.no_grad()
def score_examples(
    logits_of: Callable[[TokenBatch], torch.Tensor],
    examples: Sequence[Example],
    batch_size: int,
    pad_id: int,
    vocab: Optional[DigitVocab],
    device: Any,
) -> ForcedScores:
    """:class:`ForcedScores` of ``examples``, ``batch_size`` per forward. ``logits_of`` maps a
    batch (on ``device``, spans attached) to its full-vocabulary logits [B, T, V]: the one place a
    caller's model differs (a plain model, or a training objective gathering vocabulary shards)."""
    totals: dict[str, torch.Tensor] = {}
    hits: list[torch.Tensor] = []
    for start in range(0, len(examples), batch_size):
        batch = collate(examples[start : start + batch_size], pad_id).with_spans(vocab).to(device)
        scores = score_batch(logits_of(batch), batch.targets, vocab, batch.spans)
        hits.append(scores.hits)
        for name, value in scores.sums.items():
            totals[name] = totals.get(name, 0) + value
    return ForcedScores(totals, torch.cat(hits) if hits else torch.zeros(0, dtype=torch.bool))


@dataclass
class ForcedAnswers:
    """``hits[i]``: row i's answer is right under teacher forcing; ``metrics`` over all rows."""

    hits: list[bool]
    metrics: TeacherForcedMetrics  # its tf_answer_acc is the share of ``hits``


@torch.no_grad()
def score_forced_answers(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict],
    prompt_format: str,
    max_length: int,
    batch_size: int = 32,
    device: Any = "cpu",
) -> ForcedAnswers:
    """:class:`ForcedAnswers` of ``model`` on ``rows`` (validated Alpaca rows or conversations),
    encoded under ``prompt_format`` and cut to ``max_length`` tokens, ``batch_size`` rows per
    forward. The model runs in eval mode and gets its train/eval mode back."""
    vocab = DigitVocab.from_tokenizer(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    examples = [encode(row, tokenizer, max_length, prompt_format, where=f"row {i}") for i, row in enumerate(rows)]

    def logits_of(batch: TokenBatch) -> torch.Tensor:
        return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits

    was_training = model.training
    model.eval()
    try:
        scores = score_examples(logits_of, examples, batch_size, pad_id, vocab, device)
    finally:
        model.train(was_training)
    return ForcedAnswers(scores.hits.tolist(), summarise({name: float(value) for name, value in scores.sums.items()}))
