"""The newer real vocabularies (Qwen3.5, Gemma-4, Command-R) and the tokenizer-only GGUF rebuild.

Expected ids are llama.cpp's reference tokenizations shipped beside the files in the same sdist
(``ggml-vocab-<name>.gguf.inp/.out``, made with each family's Hugging Face tokenizer) and the ids of
'0'..'9', '.' and '▁' in the files' token lists.
"""

from __future__ import annotations

import pytest
import torch

from del_core import DigitVocab, build_loss, number_spans
from del_core.tokenizers import gguf_vocab, load_tokenizer
from del_core.tokenizers.gguf_vocab import (
    TokenizerKind,
    UnsupportedGGUFVocabulary,
    read_tokenizer_kind,
    tokenizer_from_gguf_vocab,
)
from del_core.vocab import PROBE_TEXT, SINGLE_DIGIT
from helpers.shared import real_tokenizer, vocab_file, vocab_path

# name -> (ids of '0'..'9', id of '.', id of the space piece before a number)
NUMBER_IDS = {
    "qwen35": (tuple(range(15, 25)), 13, 220),  # byte-level 'Ġ'
    "gemma-4": ((236771, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236828, 236819), 236761, 236743),
    "command-r": (tuple(range(23, 33)), 21, 228),  # byte-level 'Ġ'
}
# llama.cpp's reference: "ied 4 ½ months" (a digit after a space).
REFERENCE = {
    "qwen35": [1122, 220, 19, 220, 26062, 3951],
    "gemma-4": [1178, 236743, 236812, 47041, 3794],
    "command-r": [2536, 228, 27, 228, 22957, 6983],
}


def _expected(name: str, text: str) -> list[int]:
    """Ids of a text of digits, points and single spaces when each is its own token."""
    digits, point, space = NUMBER_IDS[name]
    return [space if c == " " else point if c == "." else digits[int(c)] for c in text]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NUMBER_IDS))
def test_numbers_tokenize_one_digit_per_token(name):
    tok = real_tokenizer(name)
    assert tok("ied 4 ½ months", add_special_tokens=False)["input_ids"] == REFERENCE[name]
    for number in ("3", "333333333", "1234.56", "0.5", " 987654321", " 100.125"):
        assert tok(number, add_special_tokens=False)["input_ids"] == _expected(name, number), number


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NUMBER_IDS))
def test_digit_vocab_found_and_del_built(name):
    tok = real_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    digits, point, _space = NUMBER_IDS[name]
    assert (vocab.family, vocab.digit_ids, vocab.point_id) == (SINGLE_DIGIT, digits, point)
    assert "{%" in tok.chat_template  # the file's chat template travels with the tokenizer
    ids = torch.tensor([tok("x = 42.5 and 7", add_special_tokens=False)["input_ids"]])
    spans = number_spans(ids, vocab)
    assert int(spans.is_digit.sum()) == 4 and int(spans.is_point.sum()) == 1
    logits = torch.randn(1, ids.shape[1], len(tok), dtype=torch.float64)
    out = build_loss("del", vocab, weight=0.1)(logits, ids)
    assert out.metrics["n_digits"] == 4 and torch.isfinite(out.loss)


def _reference_cases(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's reference: inputs separated by a marker line, one line of ids per input."""
    inputs = vocab_path(f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    outputs = vocab_path(f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    assert len(outputs) >= len(inputs) > 40, name
    return [(text, [int(i) for i in ids.split()]) for text, ids in zip(inputs, outputs)]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NUMBER_IDS))
def test_every_reference_tokenization_is_reproduced(name):
    """Whitespace runs, newlines, accents, CJK, emoji, code and numbers, as upstream tokenizes them."""
    tok = real_tokenizer(name)
    wrong = [
        (text, ids) for text, ids in _reference_cases(name) if tok(text, add_special_tokens=False)["input_ids"] != ids
    ]
    assert not wrong, f"{len(wrong)} of the reference cases differ, e.g. {wrong[0][0]!r}"


@pytest.mark.slow
def test_the_rebuild_matches_transformers_on_qwen2():
    """Where transformers' GGUF route works (Qwen2), the vocabulary-fields rebuild encodes and
    decodes the same."""
    path = vocab_file("qwen2")
    rebuilt = tokenizer_from_gguf_vocab(path)
    reference = real_tokenizer("qwen2")
    texts = (PROBE_TEXT, "Ünïcödé ½ naïve\n\n  tabs\tand <|im_start|>user\nHi<|im_end|>", "x" * 40 + " 1e-5")
    for text in texts:
        ids = rebuilt(text, add_special_tokens=False)["input_ids"]
        assert ids == reference(text, add_special_tokens=False)["input_ids"], text
        assert rebuilt.decode(ids) == text
    assert len(rebuilt) == len(reference)


@pytest.mark.slow
def test_a_tokenizer_model_without_a_rebuild_is_refused_by_name(tmp_path, monkeypatch):
    """Llama-2's SentencePiece file (model 'llama') when transformers' route fails too: one error
    naming both refusals."""
    path = vocab_file("llama-spm")
    with pytest.raises(UnsupportedGGUFVocabulary, match=r"tokenizer.ggml.model='llama', tokenizer.ggml.pre='default'"):
        tokenizer_from_gguf_vocab(path)

    def refuse(*_args, **_kwargs):
        raise ValueError("GGUF model with architecture llama is not supported yet.")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", refuse)
    with pytest.raises(UnsupportedGGUFVocabulary) as error:
        load_tokenizer(path, cache_dir=tmp_path)
    assert str(error.value).startswith(f"transformers cannot load {path} (ValueError: GGUF model with architecture")
    assert "neither can the tokenizer-only rebuild" in str(error.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_header_names_the_tokenizer_and_picks_the_route():
    """Read from the header alone; the route taken is the rebuild only for Gemma-4 and Qwen3.5
    (Command-R reaches it after transformers refuses the architecture)."""
    kinds = {name: read_tokenizer_kind(vocab_file(name)) for name in ("qwen2", "qwen35", "llama-spm", "gemma-4")}
    assert kinds == {
        "qwen2": TokenizerKind("gpt2", "qwen2"),
        "qwen35": TokenizerKind("gpt2", "qwen35"),
        "llama-spm": TokenizerKind("llama", "default"),
        "gemma-4": TokenizerKind("gemma4", ""),
    }
    assert [name for name, kind in kinds.items() if kind.rebuild_preferred] == ["qwen35", "gemma-4"]
    # Qwen3.5 keeps a combining mark with its letter (llama.cpp's reference ids); transformers'
    # route, which applies Qwen2's split, gives 3 tokens.
    assert real_tokenizer("qwen35")("e\u0301", add_special_tokens=False)["input_ids"] == [68, 53839]


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    path = tmp_path / "vocab.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(ValueError, match=r"vocab.gguf: not a GGUF file \(starts with b'PK\\x03\\x04'\)"):
        read_tokenizer_kind(path)


def test_every_byte_level_split_compiles():
    from tokenizers import Regex

    for pre, patterns in gguf_vocab.BYTE_LEVEL_SPLITS.items():
        for pattern in patterns:
            Regex(pattern)  # raises on a pattern Oniguruma cannot compile
        assert patterns, pre
