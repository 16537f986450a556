"""del_core.plain_loop: the plain-PyTorch loop of the benchmark and the demo, against a
hand-written AdamW step (loss and weights after two steps), its schedule and its loss set-up."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
import torch

from del_core import DigitVocab, build_loss, plain_loop
from del_core.data.synthetic import Problem
from del_core.data.tokenized import TokenBatch, collate
from del_core.experiments.numeric_bench.char_tokenizer import build_tokenizer, encode_examples
from del_core.plain_loop import PlainLoopConfig, StepRecord, learning_rate, make_loss
from helpers.tiny_models import tiny_causal_lm


def _tiny_llama(vocab_size: int, seed: int = 0) -> torch.nn.Module:
    shape = dict(hidden=16, layers=1, heads=2, kv_heads=2, max_position_embeddings=32, tie_word_embeddings=True)
    return tiny_causal_lm("llama", vocab_size, **shape, pad_token_id=0, eos_token_id=1, bos_token_id=1, seed=seed)


def _batches() -> tuple[list[TokenBatch], DigitVocab, int]:
    tokenizer = build_tokenizer()
    problems = [
        [Problem("12+7=", Decimal(19)), Problem("3.5+1.25=", Decimal("4.75"))],
        [Problem("40-2=", Decimal(38)), Problem("9*9=", Decimal(81))],
    ]
    batches = [collate(encode_examples(p, tokenizer), tokenizer.pad_token_id) for p in problems]
    return batches, DigitVocab.from_tokenizer(tokenizer), len(tokenizer)


def _reference_steps(model, loss_fn, batches, lrs, betas, weight_decay, max_norm, eps=1e-8):
    """Two AdamW steps written out: decoupled decay, bias-corrected moments, global-norm clipping."""
    params = list(model.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    losses = []
    for t, (batch, lr) in enumerate(zip(batches, lrs), start=1):
        for p in params:
            p.grad = None
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        out = loss_fn(logits, batch.targets)
        out.loss.backward()
        losses.append(out.loss.item())
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)).item()
        scale = min(1.0, max_norm / (norm + 1e-6))
        with torch.no_grad():
            for p, mi, vi in zip(params, m, v):
                g = p.grad * scale
                p.mul_(1 - lr * weight_decay)
                mi.mul_(betas[0]).add_(g, alpha=1 - betas[0])
                vi.mul_(betas[1]).add_(g * g, alpha=1 - betas[1])
                m_hat, v_hat = mi / (1 - betas[0] ** t), vi / (1 - betas[1] ** t)
                p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    return losses


def test_two_steps_equal_a_hand_written_adamw_step():
    batches, vocab, vocab_size = _batches()
    config = PlainLoopConfig(
        steps=2, lr=0.01, betas=(0.9, 0.98), weight_decay=0.1, max_grad_norm=0.05, warmup_steps=2, min_lr_ratio=0.1
    )
    model, reference = _tiny_llama(vocab_size), _tiny_llama(vocab_size)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
    loss_fn = build_loss("del", vocab, 0.5)
    seen = []
    records = plain_loop.train(model, loss_fn, lambda step: batches[step], config, on_record=seen.append)
    expected = _reference_steps(reference, loss_fn, batches, [0.005, 0.01], (0.9, 0.98), 0.1, 0.05)

    assert [r.step for r in records] == [1, 2] and seen == records
    assert [r.lr for r in records] == [0.005, 0.01]  # warm-up: 1/2 then 2/2 of the peak
    assert [r.loss for r in records] == pytest.approx(expected, rel=1e-6)
    assert all(r.loss == pytest.approx(r.ce + r.aux, rel=1e-6) and r.aux > 0 for r in records)
    assert all(0.0 <= r.digit_acc <= 1.0 and 0.0 <= r.digit_entropy <= 2.31 for r in records)  # <= ln 10
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    moved = max((p - q).abs().max().item() for p, q in zip(model.parameters(), _tiny_llama(vocab_size).parameters()))
    assert moved > 1e-3  # the steps did change the weights (the comparison is not vacuous)


def test_learning_rate_constant_or_warmup_cosine():
    constant = PlainLoopConfig(steps=5, lr=2e-5)
    assert [learning_rate(constant, s) for s in range(5)] == [2e-5] * 5
    # The benchmark's smoke schedule (lr 3e-3, 10 warm-up steps of 60, down to 10%), as its own
    # formula wrote it: lr * (s + 1) / warmup, then lr * (0.1 + 0.9 * 0.5 * (1 + cos(pi * progress))).
    bench = PlainLoopConfig(steps=60, lr=3e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert [learning_rate(bench, s) for s in range(3)] == [3e-3 * 1 / 10, 3e-3 * 2 / 10, 3e-3 * 3 / 10]
    assert learning_rate(bench, 9) == 3e-3 and learning_rate(bench, 10) == 3e-3
    assert learning_rate(bench, 35) == pytest.approx(3e-3 * 0.55)  # half way: the mean of 1 and 0.1
    assert learning_rate(bench, 59) == pytest.approx(3e-3 * (0.1 + 0.45 * (1 + math.cos(math.pi * 49 / 50))))


def test_records_at_step_one_every_log_every_and_the_last():
    batches, vocab, vocab_size = _batches()
    model = _tiny_llama(vocab_size)
    records = plain_loop.train(
        model, build_loss("mle", vocab), lambda s: batches[s % 2], PlainLoopConfig(steps=7, lr=1e-3, log_every=3)
    )
    assert [r.step for r in records] == [1, 3, 6, 7] and all(isinstance(r, StepRecord) for r in records)
    assert all(r.aux == 0.0 for r in records) and model.training


def test_make_loss_gives_emo_a_frozen_copy_of_the_head():
    _, vocab, vocab_size = _batches()
    model = _tiny_llama(vocab_size)
    head = model.get_output_embeddings().weight
    emo = make_loss("emo", vocab, None, model)
    expected = torch.nn.functional.normalize(head.detach().clone(), dim=-1)
    with torch.no_grad():
        head.add_(1.0)  # training moves the head; the cost embedding stays the one of the start
    assert torch.equal(emo.cost_embedding, expected) and not emo.cost_embedding.requires_grad
    assert make_loss("del", vocab, 0.25, model).weight == 0.25
