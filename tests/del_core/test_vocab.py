"""Digit vocabularies found from the real tokenizers, checked by encoding real text."""

import pytest
import torch

from del_core import DigitVocab, MultiDigitVocabularyError, build_loss, number_spans
from del_core.vocab import MULTI_DIGIT, SINGLE_DIGIT
from helpers.shared import NEWER_SINGLE_DIGIT_VOCABS, SINGLE_DIGIT_VOCABS, real_tokenizer

# The newer single-digit vocabularies' first conversion is slow: their cases are in the slow tier.
ALL_SINGLE_DIGIT = (*SINGLE_DIGIT_VOCABS, *(pytest.param(n, marks=pytest.mark.slow) for n in NEWER_SINGLE_DIGIT_VOCABS))


def _encode_alone(tokenizer, char):
    """Id of ``char`` when it is written inside a number (between two digits)."""
    ids = tokenizer("7" + char + "7", add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    assert char in pieces, (char, pieces)
    return ids[pieces.index(char)] if char != "7" else ids[-1]


@pytest.mark.slow
@pytest.mark.parametrize("name", SINGLE_DIGIT_VOCABS + NEWER_SINGLE_DIGIT_VOCABS)
def test_single_digit_vocab_ids_match_encoding(name):
    tok = real_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    assert vocab.family == SINGLE_DIGIT and not vocab.multi_digit
    # Independent check: the id each digit gets when a tokenizer encodes it inside a number.
    expected = tuple(_encode_alone(tok, str(d)) for d in range(10))
    assert vocab.digit_ids == expected
    assert vocab.point_id == _encode_alone(tok, ".")
    assert [tok.decode([i]) for i in vocab.digit_ids] == list("0123456789")


def test_qwen2_ids_are_the_specs():
    vocab = DigitVocab.from_tokenizer(real_tokenizer("qwen2"))
    assert vocab.digit_ids == tuple(range(15, 25)) and vocab.point_id == 13


def test_llama2_spm_ids():
    vocab = DigitVocab.from_tokenizer(real_tokenizer("llama-spm"))
    # Llama-2's SentencePiece vocabulary: '0' = 29900, '1'..'9' = 29896.. (not in order), '.' = 29889.
    assert vocab.digit_ids == (29900, 29896, 29906, 29941, 29946, 29945, 29953, 29955, 29947, 29929)
    assert vocab.point_id == 29889


def test_gpt2_is_refused_with_the_reason():
    tok = real_tokenizer("gpt-2")
    with pytest.raises(MultiDigitVocabularyError) as err:
        DigitVocab.from_tokenizer(tok, name="gpt-2")
    assert err.value.family == MULTI_DIGIT
    message = str(err.value)
    assert "irregular multi-digit" in message and "not supported" in message
    assert "width 3: 777 of 1000" in message and "leading space" in message
    # The examples it names really are multi-digit tokens of this tokenizer.
    assert err.value.examples
    for tid, text in err.value.examples:
        assert len(text) >= 2 and text.isdigit() and tok.decode([tid]).strip() == text


def test_llama3_number_tokens_by_width():
    tok = real_tokenizer("llama-bpe")
    vocab = DigitVocab.from_tokenizer(tok, name="llama-bpe")
    assert vocab.family == MULTI_DIGIT and vocab.multi_digit and vocab.max_width == 3
    assert vocab.grouping == "left to right in groups of 3"
    assert len(vocab.number_ids) == 1110 and vocab.group_offsets == (0, 10, 110, 1110)
    # Every id decodes to its value written with its width (leading zeros included).
    texts = [str(v).zfill(w) for w in (1, 2, 3) for v in range(10**w)]
    assert [tok.decode([i]) for i in vocab.number_ids] == texts
    assert tok.decode([vocab.point_id]) == "."
    # Independent check by encoding: each token of a number is the id of its text.
    by_text = dict(zip(texts, vocab.number_ids))
    ids = tok("x 1234567.0625 and 9,007", add_special_tokens=False)["input_ids"]
    pieces = [tok.decode([i]) for i in ids]
    assert pieces[1:] == [" ", "123", "456", "7", ".", "062", "5", " and", " ", "9", ",", "007"]
    for tid, piece in zip(ids, pieces):
        if piece.isdigit():
            assert by_text[piece] == tid


def test_llama3_spans_place_values_and_widths():
    tok = real_tokenizer("llama-bpe")
    vocab = DigitVocab.from_tokenizer(tok)
    ids = torch.tensor([tok("1234567.891 and 0.0625", add_special_tokens=False)["input_ids"]])
    spans = number_spans(ids, vocab)
    keep = spans.is_digit[0] | spans.is_point[0]
    assert spans.width[0][keep].tolist() == [3, 3, 1, 0, 3, 1, 0, 3, 1]
    assert spans.digit_value[0][keep].tolist() == [123, 456, 7, -1, 891, 0, -1, 62, 5]
    # docs/number_tokens.md: the place of a token is the place of its last digit.
    u = [10, 4, 2, 0, 1.02**-4, 2, 0, 1.02**-4, 1.02**-5]
    assert spans.place_value[0][keep].tolist() == pytest.approx(u, rel=1e-12)
    assert spans.place_index[0][keep].tolist() == [5, 2, 1, 0, 1, 1, 0, 2, 1]


@pytest.mark.parametrize("name", ALL_SINGLE_DIGIT)
def test_spans_on_real_text(name):
    tok = real_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok)
    ids = tok("He paid 1234 and 3.14, then 100.125 dollars.", add_special_tokens=False)["input_ids"]
    spans = number_spans(torch.tensor([ids]), vocab)
    u = spans.place_value[0][spans.is_digit[0] | spans.is_point[0]].tolist()
    # The sentence-final '.' follows a letter, so it is a span of its own (a lone point, u = 0).
    expected = [8, 6, 4, 2, 2, 0, 1.02**-2, 1.02**-3, 6, 4, 2, 0, 1.02**-2, 1.02**-3, 1.02**-4, 0]
    assert u == pytest.approx(expected, rel=1e-6)


def test_loss_with_real_qwen2_ids_and_lm_head_rows():
    """Qwen2.5's head has 151,936 rows, more than the tokenizer's tokens: ids are ids."""
    tok = real_tokenizer("qwen2")
    vocab = DigitVocab.from_tokenizer(tok)
    ids = torch.tensor([tok("x = 42.5", add_special_tokens=False)["input_ids"]])
    logits = torch.randn(1, ids.shape[1], 151_936)
    out = build_loss("del", vocab)(logits, ids)
    assert out.metrics["n_digits"] == 3 and torch.isfinite(out.loss)


def test_digit_vocab_validation():
    with pytest.raises(ValueError, match="10 ids"):
        DigitVocab(tuple(range(9)), 20)
    with pytest.raises(ValueError, match="distinct"):
        DigitVocab(tuple(range(10)), 3)
    vocab = DigitVocab(tuple(range(10, 20)), 5)
    with pytest.raises(ValueError, match="outside"):
        vocab.check_fits(15)
