"""The multi-digit extension (docs/number_tokens.md) against a slow reference written from that page.

The reference reads every number token as the digits it holds, takes the spec's place of each
digit, and gives the token the place of its last digit; the terms are the page's formulas written
out per position. It is checked on the real Llama-3 vocabulary and on a synthetic one whose ids
are shuffled; the reduction to the single-digit losses is checked exactly (``torch.equal``).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from del_core import DigitVocab, build_loss, number_spans
from helpers.host_syncs import count_host_syncs
from helpers.shared import real_tokenizer
from helpers.toy_number_vocab import make_number_vocab

DIGIT_LOSSES = ("del", "ntl_was", "ntl_mse", "dist2")
TEXTS = ["a1234567.0625b", "x.5_98,7654y", "zz100.125z3", "no digits", "7.12.345q 42"]


def token_texts(labels: list[int], vocab: DigitVocab) -> list[str | None]:
    """Text of each label: digits for number tokens, '.' for the point, None otherwise."""
    texts = {tid: str(v).zfill(w) for w in range(1, vocab.max_width + 1) for v, tid in _group(vocab, w)}
    return ["." if t == vocab.point_id else texts.get(t) for t in labels]


def _group(vocab: DigitVocab, width: int):
    start, end = vocab.group_offsets[width - 1], vocab.group_offsets[width]
    return enumerate(vocab.number_ids[start:end])


def reference_places(labels: list[int], vocab: DigitVocab) -> list[tuple[float, int]]:
    """(u, place index) per position: the spec's table applied to the digits, read off the last
    digit of each token (docs/number_tokens.md section 2)."""
    texts = token_texts(labels, vocab)
    out = [(0.0, 0)] * len(labels)
    i = 0
    while i < len(labels):
        if texts[i] is None:
            i += 1
            continue
        end = i
        while end < len(labels) and texts[end] is not None:
            end += 1
        chars = [(pos, ch) for pos in range(i, end) for ch in texts[pos]]  # the span, one char per place
        p = next((j for j, (_, ch) in enumerate(chars) if ch == "."), len(chars))
        n_frac = sum(ch != "." for _, ch in chars[p + 1 :])
        for j, (pos, ch) in enumerate(chars):
            last = j + 1 == len(chars) or chars[j + 1][0] != pos
            if ch == "." or not last:
                continue
            if j < p:
                out[pos] = (2.0 * (p - j), p - j)
            else:
                frac_before = sum(c != "." for _, c in chars[p + 1 : j])
                out[pos] = (1.02 ** -(j - p + 1), n_frac - frac_before)
        i = end
    return out


def reference_loss(logits, labels, vocab, name, weight, tau=1.0, place_weighted=False):
    """CE + weight * mean over number-token positions of the page's term, position by position.

    Returns (loss, entropy mean, accuracy) as float64 tensors."""
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    valid = flat_labels != -100
    ce = F.cross_entropy(flat_logits[valid], flat_labels[valid], reduction="sum") / valid.sum()
    terms, entropies, hits = [], [], []
    rows = labels.reshape(-1, labels.shape[-1])
    for row_logits, row in zip(logits.reshape(*rows.shape, logits.shape[-1]), rows):
        row = row.tolist()
        places = reference_places(row, vocab)
        for t, text in enumerate(token_texts(row, vocab)):
            if text is None or text == ".":
                continue
            w, y = len(text), int(text)
            ids = [tid for _, tid in _group(vocab, w)]
            z = row_logits[t, ids]
            q = torch.softmax(z, -1)
            c = torch.arange(10**w, dtype=z.dtype)
            u, k = places[t]
            if name == "del":
                onehot = (c == y).to(z.dtype)
                bce = -(onehot * F.logsigmoid(z) + (1 - onehot) * F.logsigmoid(-z))
                term = u * (q * bce).sum()
            elif name == "ntl_was":
                term = (q * (y - c).abs()).sum() / 10 ** (w - 1)
            elif name == "ntl_mse":
                term = (((q * c).sum() - y) / 10 ** (w - 1)) ** 2
            else:
                log_t = torch.log_softmax(-((y - c) ** 2) / tau, -1)
                term = (log_t.exp() * (log_t - q.log())).sum() * (k if place_weighted else 1)
            terms.append(term)
            entropies.append(-(q * q.log()).sum())
            hits.append(float(int(z.argmax()) == y))
    n = max(len(terms), 1)
    aux = torch.stack(terms).sum() / n if terms else torch.zeros((), dtype=logits.dtype)
    entropy = torch.stack(entropies).sum() / n if entropies else torch.zeros(())
    return ce + weight * aux, entropy, sum(hits) / n


def _case_batch(case, texts=TEXTS, seed=0, dtype=torch.float64):
    rows = [case.encode(t) for t in texts]
    length = max(map(len, rows))
    labels = torch.tensor([r + [-100] * (length - len(r)) for r in rows])
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(*labels.shape, case.V, generator=g, dtype=torch.float64)).to(dtype)
    return logits, labels


def _options(place_weighted=False):
    return {"place_weighted": True} if place_weighted else {}


def _loss_and_grad(loss_fn, logits, labels):
    z = logits.detach().clone().requires_grad_(True)
    out = loss_fn(z, labels)
    out.loss.backward()
    return out, z.grad


LOSS_CASES = [(n, False) for n in DIGIT_LOSSES] + [("dist2", True)]


@pytest.mark.parametrize("name, place_weighted", LOSS_CASES)
def test_toy_vocabulary_matches_the_reference(name, place_weighted):
    case = make_number_vocab(3, V=1200)
    logits, labels = _case_batch(case)
    loss_fn = build_loss(name, case.vocab, weight=0.7, validate="sync", **_options(place_weighted))
    out, grad = _loss_and_grad(loss_fn, logits, labels)
    z = logits.clone().requires_grad_(True)
    ref, entropy, acc = reference_loss(z, labels, case.vocab, name, 0.7, place_weighted=place_weighted)
    ref.backward()
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(grad, z.grad, rtol=1e-10, atol=1e-13)
    assert out.metrics["digit_entropy"].item() == pytest.approx(entropy.item(), rel=1e-6)
    assert out.metrics["digit_acc"].item() == pytest.approx(acc, abs=1e-7)
    # Number tokens of every width are counted: 1234567.0625 alone is 123 456 7 062 5.
    n_numbers = sum(t is not None and t != "." for row in labels.tolist() for t in token_texts(row, case.vocab))
    assert out.metrics["n_digits"].item() == n_numbers == 16


def test_wide_tokens_are_scored_by_their_value():
    """A wide target gets its term from its own width group: logits favouring the right 3-digit
    token lower NTL-WAS, favouring a close value lowers it less than a far one."""
    case = make_number_vocab(3, V=1200)
    labels = torch.tensor([[case.id_of("456")]])
    loss_fn = build_loss("ntl_was", case.vocab, weight=1.0)

    def aux_with_peak_at(text):
        logits = torch.zeros(1, 1, case.V, dtype=torch.float64)
        logits[0, 0, case.id_of(text)] = 20.0
        return loss_fn(logits, labels).aux.item()

    assert aux_with_peak_at("456") < aux_with_peak_at("457") < aux_with_peak_at("956")
    # In units of the leading place: a sure 956 against 456 is 500 / 100 = 5 (up to the tail mass).
    assert aux_with_peak_at("956") == pytest.approx(5.0, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", DIGIT_LOSSES)
def test_llama3_real_vocabulary_matches_the_reference(name):
    tok = real_tokenizer("llama-bpe")
    vocab = DigitVocab.from_tokenizer(tok)
    ids = tok("Total 1234567.0625, then .5 and 98 or 3.14159 x", add_special_tokens=False)["input_ids"]
    labels = torch.tensor([ids])
    logits = 3 * torch.randn(1, len(ids), 128_256, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out, grad = _loss_and_grad(build_loss(name, vocab, weight=0.5), logits, labels)
    z = logits.clone().requires_grad_(True)
    ref, entropy, acc = reference_loss(z, labels, vocab, name, 0.5)
    ref.backward()
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(grad, z.grad, rtol=1e-10, atol=1e-13)
    widths = number_spans(labels, vocab).width[0].tolist()
    assert sorted(set(widths)) == [0, 1, 2, 3]  # '98', '123', '7': every width is exercised


@pytest.mark.parametrize("name", ("mle", "mixce") + DIGIT_LOSSES)
def test_single_digit_labels_on_a_multi_digit_vocabulary_reduce_exactly(name):
    """Llama-3's vocabulary, labels made of lone digits: the values, metrics and gradients are
    bit for bit those of the single-digit vocabulary of the same '0'..'9' and '.' ids."""
    multi = DigitVocab.from_tokenizer(real_tokenizer("llama-bpe"))
    single = DigitVocab(multi.digit_ids, multi.point_id)
    d, p = multi.digit_ids, multi.point_id
    labels = torch.tensor([[99, d[3], p, d[1], d[4], 99, d[7], -100], [d[0], d[9], 99, p, d[5], d[2], 99, 99]])
    logits = 3 * torch.randn(2, 8, 128_256, generator=torch.Generator().manual_seed(2))
    out_multi, grad_multi = _loss_and_grad(build_loss(name, multi), logits, labels)
    out_single, grad_single = _loss_and_grad(build_loss(name, single), logits, labels)
    assert torch.equal(out_multi.loss, out_single.loss) and torch.equal(out_multi.aux, out_single.aux)
    assert all(torch.equal(out_multi.metrics[k], out_single.metrics[k]) for k in out_single.metrics)
    assert torch.equal(grad_multi, grad_single)


@pytest.mark.slow
@pytest.mark.parametrize("name, place_weighted", LOSS_CASES)
def test_qwen2_equals_the_reference_with_width_one(name, place_weighted):
    """On Qwen2's single-digit vocabulary the page's reference is the spec's definition."""
    tok = real_tokenizer("qwen2")
    vocab = DigitVocab.from_tokenizer(tok)
    ids = tok("He paid 1234 and 3.14, then 100.125 or .5 dollars.", add_special_tokens=False)["input_ids"]
    labels = torch.tensor([ids])
    logits = 3 * torch.randn(1, len(ids), 151_936, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    out, grad = _loss_and_grad(build_loss(name, vocab, weight=0.3, **_options(place_weighted)), logits, labels)
    z = logits.clone().requires_grad_(True)
    ref, _, _ = reference_loss(z, labels, vocab, name, 0.3, place_weighted=place_weighted)
    ref.backward()
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(grad, z.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize("name, place_weighted", LOSS_CASES)
def test_gradcheck_float64(name, place_weighted):
    case = make_number_vocab(2, V=114, seed=4)
    logits, labels = _case_batch(case, ["a12.5_", "987.06"], seed=5)
    loss_fn = build_loss(name, case.vocab, weight=0.9, **_options(place_weighted))
    z = logits.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: loss_fn(x, labels).loss, (z,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", DIGIT_LOSSES)
@pytest.mark.parametrize("chunking", [{"chunk_size": 4}, {"chunk_size": 256}, {"num_chunks": 3}])
def test_chunked_path_equals_the_logits_path(name, chunking):
    case = make_number_vocab(3, V=1200, seed=6)
    _, labels = _case_batch(case)
    g = torch.Generator().manual_seed(7)
    hidden = torch.randn(*labels.shape, 8, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(case.V, 8, generator=g, dtype=torch.float64, requires_grad=True)
    loss_fn = build_loss(name, case.vocab, weight=0.6)
    dense = loss_fn(hidden @ weight.T, labels)
    dense_grads = torch.autograd.grad(dense.loss, (hidden, weight))
    chunked = loss_fn.from_hidden(hidden, weight, labels, **chunking)
    chunked_grads = torch.autograd.grad(chunked.loss, (hidden, weight))
    assert chunked.loss.item() == pytest.approx(dense.loss.item(), rel=1e-12)
    for got, want in zip(chunked_grads, dense_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_chunked_gradcheck_float64():
    case = make_number_vocab(2, V=120, seed=8)
    _, labels = _case_batch(case, ["7.25_x", "40.031"])
    g = torch.Generator().manual_seed(9)
    hidden = torch.randn(*labels.shape, 3, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(case.V, 3, generator=g, dtype=torch.float64, requires_grad=True)
    loss_fn = build_loss("del", case.vocab, weight=0.8)
    # Two backwards through one graph (gradcheck's reentrancy check): the first uses the CE
    # gradients formed in the forward, the second recomputes them; equal to round-off.
    assert torch.autograd.gradcheck(
        lambda h, w: loss_fn.from_hidden(h, w, labels, chunk_size=5).loss,
        (hidden, weight),
        eps=1e-6,
        atol=1e-7,
        nondet_tol=1e-12,
    )


@pytest.mark.parametrize("name", DIGIT_LOSSES)
def test_multi_digit_loss_calls_do_not_sync(name):
    case = make_number_vocab(3, V=1200)
    logits, labels = _case_batch(case, dtype=torch.float32)
    loss_fn = build_loss(name, case.vocab)
    num_digits = torch.tensor(40)

    def call():
        z = logits.clone().requires_grad_(True)
        loss_fn(z, labels, 100, num_digits).loss.backward()

    call()  # the first call caches the id tensors on the device
    with count_host_syncs() as log:
        call()
    assert not log.from_package("/del_core/"), "\n".join(e.origin for e in log.from_package("/del_core/"))


CASE3 = make_number_vocab(3, V=1200, seed=10)
ALPHABET = [CASE3.id_of(t) for t in ("7", "0", "42", "05", "123", "007", "999")]
ALPHABET += [CASE3.vocab.point_id] * 3 + [CASE3.other] * 3 + [-100]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(ALPHABET), min_size=12, max_size=12), min_size=1, max_size=3))
def test_spans_match_the_digit_reading(rows):
    spans = number_spans(torch.tensor(rows), CASE3.vocab)
    for r, row in enumerate(rows):
        places = reference_places(row, CASE3.vocab)
        assert spans.place_value[r].tolist() == pytest.approx([u for u, _ in places], rel=1e-12)
        assert spans.place_index[r].tolist() == [k for _, k in places]
        texts = token_texts(row, CASE3.vocab)
        assert spans.width[r].tolist() == [len(t) if t not in (None, ".") else 0 for t in texts]
        assert spans.digit_value[r].tolist() == [int(t) if t not in (None, ".") else -1 for t in texts]


def test_entropy_metric_of_a_uniform_wide_group_is_log_1000():
    case = make_number_vocab(3, V=1200)
    labels = torch.tensor([[case.id_of("250")]])
    out = build_loss("del", case.vocab)(torch.zeros(1, 1, case.V), labels)
    assert out.metrics["digit_entropy"].item() == pytest.approx(math.log(1000), rel=1e-6)
