"""Sequence-parallel shards (del_core.data.sequence_shards) and the losses on them, in one process.

Every loss of the catalog (and the multi-digit Llama-3-like path) computed shard by shard, with
the spans and normalisers of the WHOLE batch, sums to the loss of the whole batch, its gradient
concatenates to the whole gradient; numbers straddle the cuts in every batch used. Spans computed
per shard (the silent bug sequence parallelism invites) give a different DEL and place-weighted
DIST2 on those batches.
"""

from __future__ import annotations

import pytest
import torch

from del_core import LOSS_NAMES, number_spans
from del_core.data.sequence_shards import (
    SPAN_COLUMNS,
    SPANS_PADDING,
    pad_batch,
    padded_length,
    pop_span_columns,
    shard_batch,
    shard_range,
    shard_spans,
    span_columns,
)
from del_core.data.tokenized import Example, Packed, collate
from del_core.losses import build_loss_for_model, loss_needs
from del_core.spans import IGNORE_INDEX
from helpers.sequence_parallel import numbers_across_cuts
from helpers.toy_number_vocab import make_number_vocab
from helpers.toy_vocab import VOCAB, V, build, encode

# 20 characters each: for 2 and 4 shards the cuts fall at 10 and 5 / 10 / 15, inside numbers.
TEXTS = ["ab1234567.25c_99.5de", "x3.14159265358979yz_", "12.5_q1000000.0625zz", "word 4.0 and 77777 !"]
NUMBER_TEXTS = ["ab1234567.0625987_5y", "zz100.125z3456789012", "7.12.345q 42 1000000"]
H = 5


def toy_batch(texts=TEXTS):
    """A collated TokenBatch of ``texts`` on the toy vocabulary with its spans."""
    items = [Example(list(range(len(t))), encode(t)) for t in texts]
    return collate(items, pad_id=0).with_spans(VOCAB)


def number_case():
    """The multi-digit toy vocabulary and NUMBER_TEXTS on it, right-padded with IGNORE_INDEX."""
    case = make_number_vocab(3, V=1200)
    rows = [case.encode(t) for t in NUMBER_TEXTS]
    width = max(len(row) for row in rows)
    return case, torch.tensor([row + [IGNORE_INDEX] * (width - len(row)) for row in rows])


def test_padded_length_and_shard_range():
    assert [padded_length(n, 4) for n in (1, 4, 5, 8)] == [4, 4, 8, 8]
    assert shard_range(12, 2, 3) == (8, 12)
    with pytest.raises(ValueError, match="pad it first"):
        shard_range(10, 0, 4)
    with pytest.raises(ValueError, match="outside"):
        shard_range(12, 3, 3)
    with pytest.raises(ValueError, match="parts must be >= 1"):
        padded_length(3, 0)


def test_padding_is_what_number_spans_gives_for_ignored_labels():
    batch = toy_batch()
    padded = pad_batch(batch, 23, pad_id=5)
    assert padded.input_ids.shape == (4, 23)
    assert (padded.targets[:, 20:] == IGNORE_INDEX).all() and (padded.input_ids[:, 20:] == 5).all()
    assert (padded.attention_mask[:, 20:] == 0).all()
    # position ids continue each row's last one: 20 positions of one example -> 20, 21, 22
    last = batch.position_ids[:, -1:]
    assert torch.equal(padded.position_ids[:, 20:], last + torch.tensor([1, 2, 3]))
    expected = number_spans(padded.targets, VOCAB)
    for name, got, want in zip(SPANS_PADDING._fields, padded.spans, expected):
        assert got.dtype == want.dtype and torch.equal(got, want), name


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
def test_shards_concatenate_to_the_padded_batch(parts):
    batch = toy_batch()
    shards = [shard_batch(batch, r, parts, pad_id=0) for r in range(parts)]
    whole = pad_batch(batch, padded_length(20, parts), pad_id=0)
    assert len({s.input_ids.shape for s in shards}) == 1
    for field in ("input_ids", "targets", "attention_mask", "position_ids"):
        assert torch.equal(torch.cat([getattr(s, field) for s in shards], 1), getattr(whole, field)), field
    for i, name in enumerate(SPANS_PADDING._fields):
        assert torch.equal(torch.cat([s.spans[i] for s in shards], 1), whole.spans[i]), name


def test_packed_rows_keep_their_position_ids_across_the_cut():
    packed = Packed([1] * 9, [IGNORE_INDEX] * 9, [0, 1, 2, 3, 0, 1, 2, 0, 1], [4, 3, 2])
    batch = collate([packed], pad_id=0)
    shards = [shard_batch(batch, r, 2, pad_id=0) for r in range(2)]
    assert shards[0].position_ids.tolist() == [[0, 1, 2, 3, 0]]
    assert shards[1].position_ids.tolist() == [[1, 2, 0, 1, 2]]  # the last: padding to 10 joins the last example


def test_padding_keeps_a_row_of_one_example_one_causal_block():
    """Rows of unequal length (collate's padding) and a length sp does not divide (shard padding)
    leave every unpacked row one example: the packed SDPA builds no [B, 1, T, T] mask for them."""
    from del_core.models.sequence_attention import block_causal_mask

    items = [Example([1] * 7, [IGNORE_INDEX] * 7), Example([1] * 4, [IGNORE_INDEX] * 4)]
    batch = pad_batch(collate(items, pad_id=0), padded_length(7, 4), pad_id=0)
    assert batch.position_ids.tolist() == [list(range(8)), list(range(8))]
    assert block_causal_mask(batch.position_ids) is None
    packed = collate([Packed([1] * 5, [IGNORE_INDEX] * 5, [0, 1, 2, 0, 1], [3, 2])], pad_id=0)
    assert block_causal_mask(pad_batch(packed, 8, pad_id=0).position_ids) is not None


def test_a_batch_without_spans_shards_without():
    items = [Example([1, 2, 3], [2, 3, IGNORE_INDEX])]
    shard = shard_batch(collate(items, 0), 1, 2, pad_id=0)
    assert shard.spans is None and shard.targets.tolist() == [[IGNORE_INDEX, IGNORE_INDEX]]


def test_span_columns_round_trip():
    spans = toy_batch().spans
    batch = {"input_ids": torch.zeros(4, 20), **span_columns(spans)}
    assert set(batch) == {"input_ids", *SPAN_COLUMNS}
    back = pop_span_columns(batch)
    assert set(batch) == {"input_ids"} and all(torch.equal(a, b) for a, b in zip(back, spans))
    assert pop_span_columns(batch) is None
    with pytest.raises(KeyError, match="spans.width"):
        pop_span_columns({key: value for key, value in span_columns(spans).items() if key != "spans.width"})


@pytest.mark.parametrize("parts", [2, 4])
def test_the_test_batches_have_numbers_across_the_cuts(parts):
    assert numbers_across_cuts(toy_batch().spans, parts) >= 3
    case, labels = number_case()
    assert numbers_across_cuts(number_spans(labels, case.vocab), parts) >= 1


def _whole_and_sharded(loss_fn, logits, labels, spans, parts, per_shard_spans=False):
    """(loss, grad) of the whole batch and (sum of shard losses, concatenated shard grads), the
    shards using the whole batch's normalisers and (unless ``per_shard_spans``) its spans."""
    num_tokens = (labels != IGNORE_INDEX).sum()
    num_digits = spans.is_digit.sum()
    z = logits.detach().clone().requires_grad_(True)
    whole = loss_fn(z, labels, num_tokens, num_digits, spans=spans)
    whole.loss.backward()
    total, grads = 0.0, []
    for r in range(parts):
        start, end = shard_range(labels.shape[1], r, parts)
        zr = logits[:, start:end].detach().clone().requires_grad_(True)
        shard = None if per_shard_spans else shard_spans(spans, r, parts)
        out = loss_fn(zr, labels[:, start:end], num_tokens, num_digits, spans=shard)
        out.loss.backward()
        total = total + out.loss.detach()
        grads.append(zr.grad)
    return (whole.loss.detach(), z.grad), (total, torch.cat(grads, 1))


def _toy_case(seed=0):
    batch = toy_batch()
    logits = 3 * torch.randn(
        *batch.targets.shape, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    return logits, batch.targets, batch.spans


@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("name", [name for name in LOSS_NAMES if not loss_needs(name).whole_sequences])
def test_every_loss_summed_over_shards_equals_the_whole(name, parts):
    logits, labels, spans = _toy_case()
    (whole, grad), (summed, grads) = _whole_and_sharded(build(name), logits, labels, spans, parts)
    torch.testing.assert_close(summed, whole, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grads, grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["number_level", "ntil"])
def test_a_loss_scoring_whole_numbers_differs_over_shards_and_is_refused(name):
    """The number-level terms are not sums over tokens: a number cut by a shard boundary changes
    them (the reason sequence parallelism refuses these losses)."""
    logits, labels, spans = _toy_case()
    (_, grad), (_, grads) = _whole_and_sharded(build(name), logits, labels, spans, 4)
    assert (grads - grad).abs().max() > 1e-4
    assert loss_needs(name).whole_sequences


def test_place_weighted_dist2_summed_over_shards_equals_the_whole():
    logits, labels, spans = _toy_case(1)
    loss_fn = build("dist2", place_weighted=True)
    (whole, grad), (summed, grads) = _whole_and_sharded(loss_fn, logits, labels, spans, 4)
    torch.testing.assert_close(summed, whole, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grads, grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["mle", "del", "ntl_was", "ntl_mse", "dist2"])
def test_multi_digit_tokens_summed_over_shards_equal_the_whole(name):
    case, labels = number_case()
    spans = number_spans(labels, case.vocab)
    assert spans.width.max() == 3
    logits = 3 * torch.randn(*labels.shape, case.V, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    loss_fn = build_loss_for_model(name, case.vocab)
    for parts in (2, 4):
        (whole, grad), (summed, grads) = _whole_and_sharded(loss_fn, logits, labels, spans, parts)
        torch.testing.assert_close(summed, whole, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grads, grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["del", "dist2", "emo"])
def test_the_chunked_path_summed_over_shards_equals_the_whole(name):
    batch = toy_batch()
    labels, spans = batch.targets, batch.spans
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(*labels.shape, H, generator=g, dtype=torch.float64)
    weight = 2 * torch.randn(V, H, generator=g, dtype=torch.float64)
    loss_fn = build(name)
    num_tokens, num_digits = (labels != IGNORE_INDEX).sum(), spans.is_digit.sum()
    whole = loss_fn.from_hidden(hidden, weight, labels, num_tokens, num_digits, chunk_size=7, spans=spans).loss
    summed = sum(
        loss_fn.from_hidden(
            hidden[:, a:b], weight, labels[:, a:b], num_tokens, num_digits, chunk_size=7, spans=shard_spans(spans, r, 4)
        ).loss
        for r, (a, b) in enumerate(shard_range(20, r, 4) for r in range(4))
    )
    torch.testing.assert_close(summed, whole, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name, options", [("del", {}), ("dist2", {"place_weighted": True})])
def test_spans_computed_per_shard_give_a_different_loss(name, options):
    """The broken variant: each shard finds its own spans. A number cut in two reads as two
    numbers, so its digits get wrong place values and DEL / place-weighted DIST2 change."""
    logits, labels, spans = _toy_case()
    loss_fn = build(name, **options)
    (whole, _), (right, _) = _whole_and_sharded(loss_fn, logits, labels, spans, 2)
    (_, _), (broken, _) = _whole_and_sharded(loss_fn, logits, labels, spans, 2, per_shard_spans=True)
    torch.testing.assert_close(right, whole, rtol=1e-12, atol=1e-14)
    assert abs(float(broken - whole)) > 1e-3 * abs(float(whole))


def test_spans_computed_per_shard_misplace_the_digits_at_the_cut():
    spans = toy_batch().spans
    cut = torch.cat([number_spans(shard, VOCAB).place_value for shard in toy_batch().targets.chunk(2, dim=1)], 1)
    differs = cut != spans.place_value
    assert differs.any() and (differs <= spans.is_digit).all()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["del", "ntl_was", "dist2"])
def test_the_real_llama3_vocabulary_summed_over_shards_equals_the_whole(name):
    """Llama-3's tokens of 1..3 digits: a number cut between two of its tokens keeps its places."""
    from del_core import DigitVocab
    from helpers.shared import real_tokenizer

    tok = real_tokenizer("llama-bpe")
    vocab = DigitVocab.from_tokenizer(tok)
    text = "So 1234567.0625 then 98765432.5 and 3.14159265 or 4444444 x"
    labels = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    spans = number_spans(labels, vocab)
    assert numbers_across_cuts(spans, 4) >= 2 and spans.width.max() == 3
    logits = 3 * torch.randn(*labels.shape, 128_256, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    options = {"place_weighted": True} if name == "dist2" else {}
    loss_fn = build_loss_for_model(name, vocab, **options)
    padded = padded_length(labels.shape[1], 4)
    labels = torch.nn.functional.pad(labels, (0, padded - labels.shape[1]), value=IGNORE_INDEX)
    logits = torch.nn.functional.pad(logits, (0, 0, 0, padded - logits.shape[1]))
    spans = number_spans(labels, vocab)
    (whole, grad), (summed, grads) = _whole_and_sharded(loss_fn, logits, labels, spans, 4)
    torch.testing.assert_close(summed, whole, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grads, grad, rtol=1e-12, atol=1e-14)
    if name != "ntl_was":  # NTL reads no place: only DEL and place-weighted DIST2 see spans cut per shard
        (_, _), (broken, _) = _whole_and_sharded(loss_fn, logits, labels, spans, 4, per_shard_spans=True)
        assert abs(float(broken - whole)) > 1e-4 * abs(float(whole))
