"""Held-out measurements taken before and after training: teacher-forced digit metrics and,
optionally, greedy answers.

Teacher-forced (per data-parallel shard, summed over ranks by the caller):
  ce            token-mean cross-entropy of the responses
  digit_acc     share of digit positions whose argmax over the ten digits is the target digit
  digit_entropy mean entropy (nats) of the ten-digit distribution at digit positions
  number_acc    share of numbers (maximal digit/point spans) with every digit argmax-right
Generation: ``answer_acc``, the share of problems whose last number in the greedy answer equals the
last number of the reference output (numerically).
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Optional, Sequence

import torch

from del_core import DigitVocab, number_spans
from recipes.prompting import format_prompt

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def last_number(text: str) -> Optional[Decimal]:
    """The last number written in ``text`` (thousands commas dropped), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return Decimal(found[-1].replace(",", ""))
    except InvalidOperation:
        return None


@torch.no_grad()
def teacher_forced_sums(logits: torch.Tensor, targets: torch.Tensor, vocab: Optional[DigitVocab]) -> torch.Tensor:
    """Sums [8] (float64) over one batch: CE sum, tokens, digit hits, entropy sum, digits,
    right numbers, numbers, 0 (padding). Divide after summing over batches and ranks."""
    logits = logits.float()
    valid = targets != -100
    ce = torch.nn.functional.cross_entropy(logits[valid], targets[valid], reduction="sum")
    sums = torch.zeros(8, dtype=torch.float64, device=logits.device)
    sums[0], sums[1] = ce.double(), valid.sum()
    if vocab is None:
        return sums
    spans = number_spans(targets, vocab)
    digit_logits = logits[..., vocab.digit_tensor().to(logits.device)]
    log_q = digit_logits.log_softmax(-1)
    entropy = -(log_q.exp() * log_q).sum(-1)
    right = digit_logits.argmax(-1) == spans.digit_value
    wrong_digit = spans.is_digit & ~right
    span_id = spans.span_start.reshape(-1).long().cumsum(0) - 1  # spans never cross sequences
    in_span = (spans.is_digit | spans.is_point).reshape(-1)
    n_spans = int(spans.span_start.sum())
    wrong_span = torch.zeros(max(n_spans, 1), dtype=torch.long, device=logits.device)
    wrong_span.index_add_(0, span_id[in_span], wrong_digit.reshape(-1)[in_span].long())
    sums[2] = (right & spans.is_digit).sum()
    sums[3] = entropy[spans.is_digit].double().sum()
    sums[4] = spans.is_digit.sum()
    sums[5] = (wrong_span[:n_spans] == 0).sum()
    sums[6] = n_spans
    return sums


def summarise(sums: torch.Tensor) -> dict[str, float]:
    s = sums.tolist()
    return {
        "ce": s[0] / max(s[1], 1),
        "digit_acc": s[2] / max(s[4], 1),
        "digit_entropy": s[3] / max(s[4], 1),
        "number_acc": s[5] / max(s[6], 1),
        "tokens": s[1],
        "digits": s[4],
        "numbers": s[6],
    }


@torch.no_grad()
def greedy_answers(lm: Any, tokenizer: Any, rows: Sequence[dict], max_new_tokens: int, device, synced: bool) -> list[str]:
    """Greedy completions of the rows' prompts (one left-padded batch). ``synced`` must be True on
    every rank under ZeRO-3 with several ranks (all ranks then run the same number of forwards)."""
    prompts = [format_prompt(row["instruction"], row.get("input", "")) for row in rows]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    finally:
        tokenizer.padding_side = side
    was_training = lm.training
    lm.eval()
    out = lm.generate(
        **encoded, max_new_tokens=max_new_tokens, do_sample=False, synced_gpus=synced,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, use_cache=True,
    )
    lm.train(was_training)
    return tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)


def answer_accuracy(rows: Sequence[dict], answers: Sequence[str]) -> float:
    hits = 0
    for row, answer in zip(rows, answers):
        reference, got = last_number(row["output"]), last_number(answer)
        hits += reference is not None and got is not None and reference == got
    return hits / max(len(rows), 1)
