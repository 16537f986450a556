"""Teacher-forced scoring of a model on held-out rows: per row, whether its stated answer comes out
right given the reference prefix (:func:`~del_core.evaluation.teacher_forced.answer_hits`), and the
teacher-forced means over all rows (CE, digit accuracy and entropy, number accuracy).

One forward per batch and no decoding, so it is several times cheaper per answer than greedy
generation: the study's primary metric on hundreds of held-out answers. The rows are encoded
exactly as training encodes them (:func:`del_core.data.tokenized.encode`, the same prompt format),
so a row's targets are its reference answer; the answer is the last number of that answer, which
for the project's generated rows is the X of "The answer is X.".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.tokenized import Example, TokenBatch, collate, encode
from del_core.evaluation.teacher_forced import TeacherForcedMetrics, score_batch, summarise
from del_core.vocab import DigitVocab


@dataclass
class ForcedScores:
    """Teacher-forced scores of a list of examples: the named sums
    (:data:`~del_core.evaluation.teacher_forced.TEACHER_FORCED_SUMS`, float64 scalars on the
    device, summed over batches) and each example's answer hit (bool [N], on the device, in the
    examples' order; no host sync per batch)."""

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
