"""The chunked path from hidden states equals the loss and gradients of full logits."""

import pytest
import torch

from del_core import LOSS_NAMES
from del_core.losses.statistics import hidden_statistics
from helpers.toy_vocab import DIGITS, TEXTS, V, build, encode

H = 6


def hidden_batch(seed=0, texts=TEXTS, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([encode(t) for t in texts])
    hidden = torch.randn(*labels.shape, H, generator=g, dtype=torch.float64).to(dtype)
    weight = (2.0 * torch.randn(V, H, generator=g, dtype=torch.float64)).to(dtype)
    return hidden, weight, labels


@pytest.mark.parametrize("chunk_size", [1, 7, 1000])
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_from_hidden_equals_dense(name, chunk_size):
    hidden, weight, labels = hidden_batch()
    loss_fn = build(name)
    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    dense = loss_fn(h1 @ w1.T, labels)
    dense.loss.backward()
    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    chunked = loss_fn.from_hidden(h2, w2, labels, chunk_size=chunk_size)
    chunked.loss.backward()
    assert chunked.loss.item() == pytest.approx(dense.loss.item(), rel=1e-12)
    assert chunked.aux.item() == pytest.approx(dense.aux.item(), rel=1e-12, abs=1e-15)
    for key in dense.metrics:
        assert chunked.metrics[key].item() == pytest.approx(dense.metrics[key].item(), rel=1e-6)
    torch.testing.assert_close(h2.grad, h1.grad, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mle", "del", "dist2"])
def test_from_hidden_gradcheck(name):
    hidden, weight, labels = hidden_batch(texts=["a1.5b", "_37xy"])
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    loss_fn = build(name)
    # gradcheck backpropagates twice through one graph: the first backward uses the CE gradients
    # formed in the forward, the second recomputes them; they agree to float64 round-off.
    assert torch.autograd.gradcheck(
        lambda h, w: loss_fn.from_hidden(h, w, labels, chunk_size=3).loss,
        (hidden, weight),
        eps=1e-6,
        atol=1e-7,
        nondet_tol=1e-12,
    )


def test_from_hidden_bf16_matches_dense_bf16():
    hidden, weight, labels = hidden_batch(seed=3, dtype=torch.bfloat16)
    loss_fn = build("del")
    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    dense = loss_fn(h1 @ w1.T, labels)
    dense.loss.backward()
    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    chunked = loss_fn.from_hidden(h2, w2, labels, chunk_size=5)
    chunked.loss.backward()
    assert chunked.loss.dtype == torch.float32
    assert chunked.loss.item() == pytest.approx(dense.loss.item(), rel=1e-6)
    assert h2.grad.dtype == torch.bfloat16 and w2.grad.dtype == torch.bfloat16
    torch.testing.assert_close(h2.grad, h1.grad, rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=2e-2, atol=1e-3)


def test_statistics_with_no_tokens():
    hidden = torch.zeros(0, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    stats = hidden_statistics(hidden, weight, torch.zeros(0, dtype=torch.long), DIGITS, chunk_size=4)
    assert stats.ce.shape == (0,) and stats.digit_logits.shape == (0, 10)
    stats.ce.sum().backward()
    assert torch.count_nonzero(weight.grad) == 0


def test_from_hidden_errors():
    hidden, weight, labels = hidden_batch()
    with pytest.raises(ValueError, match="chunk_size"):
        build("del").from_hidden(hidden, weight, labels, chunk_size=0)
    with pytest.raises(ValueError, match="do not fit"):
        build("del").from_hidden(hidden, weight[:, :-1], labels)
    with pytest.raises(ValueError, match="plus one last dimension"):
        build("del").from_hidden(hidden[:, :-1], weight, labels)


def test_eager_and_recomputing_backward_agree():
    """Both backward strategies of the chunked path, on CE plus a DEL-style digit term."""
    from del_core.losses.digit_terms import del_term

    hidden, weight, labels = hidden_batch(seed=4)
    target = labels.reshape(-1)
    digit_target = torch.randint(0, 10, target.shape, generator=torch.Generator().manual_seed(0))
    grads = []
    for eager in (False, True):
        h, w = hidden.reshape(-1, H).clone().requires_grad_(True), weight.clone().requires_grad_(True)
        stats = hidden_statistics(h, w, target, DIGITS, chunk_size=4, eager_ce_grad=eager)
        loss = stats.ce.sum() / 7 + del_term(stats.digit_logits, digit_target, torch.ones(target.shape)).sum()
        loss.backward()
        grads.append((h.grad, w.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-10, atol=1e-13)


def test_chunked_peak_memory_follows_the_formula_without_fp32_weight_buffers():
    """Exact allocated bytes of a bf16 forward + backward: the [V, H] and [N, H] gradients in bf16
    plus one chunk's fp32 logits and bf16 gradient; no fp32 [V, H] accumulator, no per-chunk
    [V, H] product (the design before cost 2 V H bytes more, plus a [V, H] bf16 temporary)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from chunked_loss import measured_peak_bytes, predicted_peak_bytes, predicted_peak_bytes_fp32_accumulator

    n, v, h, chunk = 512, 8192, 256, 64
    measured = measured_peak_bytes(n, v, h, chunk, torch.bfloat16, "del")
    predicted = predicted_peak_bytes(n, v, h, chunk, 2)
    assert abs(measured / predicted - 1) < 0.01, (measured, predicted)
    assert measured < predicted_peak_bytes_fp32_accumulator(n, v, h, chunk, 2) - 2 * v * h
