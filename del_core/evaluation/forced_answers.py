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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from del_core.data.tokenized import collate, encode
from del_core.evaluation.teacher_forced import TeacherForcedMetrics, answer_hits, summarise, teacher_forced_sums
from del_core.vocab import DigitVocab


@dataclass
class ForcedAnswers:
    """``hits[i]``: row i's answer is right under teacher forcing; ``metrics`` over all rows."""

    hits: list[bool]
    metrics: TeacherForcedMetrics

    @property
    def answer_acc(self) -> float:
        return sum(self.hits) / max(len(self.hits), 1)


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
    hits: list[bool] = []
    totals: dict[str, float] = {}
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(examples), batch_size):
            batch = collate(examples[start : start + batch_size], pad_id).with_spans(vocab).to(device)
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
            hits += answer_hits(logits, batch.targets, batch.spans, vocab).tolist()
            for name, value in teacher_forced_sums(logits, batch.targets, vocab, batch.spans).items():
                totals[name] = totals.get(name, 0.0) + float(value)
    finally:
        model.train(was_training)
    return ForcedAnswers(hits, summarise(totals))
