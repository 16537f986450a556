"""A fast tokenizer built from the vocabulary fields of a GGUF file alone.

transformers' GGUF route builds the model's config before the tokenizer, so it refuses files of
architectures it does not know (Command-R) or whose config does not validate (Gemma-4's per-layer
``num_key_value_heads``). The tokenizer needs none of that: this module reads only
``tokenizer.ggml.{model,pre,tokens,token_type,merges}`` and the special-token ids (its own header
reader, not the ``gguf`` package's), and rebuilds the
tokenizer the way llama.cpp runs it (``src/llama-vocab.cpp``):

* ``model = "gpt2"``: byte-level BPE after the pre-tokenizer regexes named by ``tokenizer.ggml.pre``
  (:data:`BYTE_LEVEL_SPLITS`; another ``pre`` is refused, naming it);
* ``model = "gemma4"``: BPE on raw UTF-8 where a space is '▁', split only at newline runs, with
  byte fallback tokens ``<0xXX>``.

Other tokenizer models are refused with :class:`UnsupportedGGUFVocabulary`.
:func:`read_tokenizer_kind` reads only the model and pre-tokenizer names, in milliseconds (the
``gguf`` package parses every field: half a minute for a 150k-token file on a busy machine), so that
:func:`del_core.tokenizers.load_tokenizer` can pick the route before converting anything.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# llama.cpp's token types (gguf.TokenType): CONTROL tokens are special, USER_DEFINED ones are
# matched whole before the model runs.
_CONTROL = 3
_USER_DEFINED = 4

_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> the regexes applied in turn before byte-level BPE (each match is a piece).
BYTE_LEVEL_SPLITS: dict[str, tuple[str, ...]] = {
    "gpt-2": (_GPT2_SPLIT,),
    "qwen2": (_QWEN2_SPLIT,),
    "qwen35": (_QWEN35_SPLIT,),
    "command-r": (r"\p{N}", _GPT2_SPLIT),
}
_SPECIAL_IDS = ("bos", "eos", "unknown", "padding")
# Pre-tokenizers transformers' GGUF route replaces by its architecture's: a Qwen3.5 file says
# architecture qwen2, and Qwen2's split cuts combining marks off their letters ('é' written as
# e + U+0301 is 2 pieces in Qwen3.5, 3 in transformers' reading).
MISREAD_BY_TRANSFORMERS = ("qwen35",)
# GGUF value types (gguf.GGUFValueType): the byte size of the fixed-size ones.
_STRING, _ARRAY = 8, 9
_FIXED_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRUCT_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


@dataclass(frozen=True)
class TokenizerKind:
    """A GGUF file's ``tokenizer.ggml.model`` and ``tokenizer.ggml.pre`` ("" when absent)."""

    model: str
    pre: str

    @property
    def rebuild_preferred(self) -> bool:
        """Whether :func:`tokenizer_from_gguf_vocab` is the right reader even where transformers'
        GGUF route loads the file (Gemma-4: it never does; a pre-tokenizer it misreads)."""
        return self.model == "gemma4" or self.pre in MISREAD_BY_TRANSFORMERS


class UnsupportedGGUFVocabulary(ValueError):
    """The GGUF file's tokenizer model or pre-tokenizer is not one this module can rebuild."""


def tokenizer_from_gguf_vocab(path: Path) -> Any:
    """A ``PreTrainedTokenizerFast`` for the vocabulary of the GGUF file ``path`` (see module doc).

    Raises :class:`UnsupportedGGUFVocabulary` naming the file and the ``tokenizer.ggml.model`` /
    ``tokenizer.ggml.pre`` value that has no rebuild here.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fields = _read_vocab_fields(path)
    model, pre = fields["model"], fields["pre"]
    if model == "gemma4":
        backend = Tokenizer(_bpe(fields, byte_fallback=True))
        _configure_spm_style(backend)
    elif model == "gpt2" and pre in BYTE_LEVEL_SPLITS:
        backend = Tokenizer(_bpe(fields, byte_fallback=False))
        _configure_byte_level(backend, BYTE_LEVEL_SPLITS[pre])
    else:
        raise UnsupportedGGUFVocabulary(
            f"{path}: tokenizer.ggml.model={model!r}, tokenizer.ggml.pre={pre!r} has no tokenizer-only rebuild "
            f"(supported: model 'gemma4', or model 'gpt2' with pre {sorted(BYTE_LEVEL_SPLITS)})"
        )
    tokens, types = fields["tokens"], fields["token_type"]
    _add_whole_tokens(backend, tokens, types)
    specials = {role: tokens[fields[role]] for role in _SPECIAL_IDS if fields.get(role) is not None}
    if fields.get("add_bos_token") and "bos" in specials:
        _prepend_bos(backend, specials["bos"], fields["bos"])
    names = {"bos": "bos_token", "eos": "eos_token", "unknown": "unk_token", "padding": "pad_token"}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        name_or_path=str(path),
        chat_template=fields["chat_template"],
        **{names[role]: text for role, text in specials.items()},
    )


def read_tokenizer_kind(path: Path) -> TokenizerKind:
    """The tokenizer model and pre-tokenizer names of the GGUF file ``path``, read from its header
    alone (arrays are skipped, not decoded). Raises ``ValueError`` when ``path`` is not GGUF."""
    found = _read_metadata(path, {"tokenizer.ggml.model", "tokenizer.ggml.pre"})
    return TokenizerKind(found.get("tokenizer.ggml.model", ""), found.get("tokenizer.ggml.pre", ""))


def _read_string(handle: IO[bytes]) -> str:
    (length,) = struct.unpack("<Q", handle.read(8))
    return handle.read(length).decode("utf-8", errors="replace")


def _skip_value(handle: IO[bytes], kind: int) -> None:
    if kind == _STRING:
        (length,) = struct.unpack("<Q", handle.read(8))
        handle.seek(length, 1)
    elif kind == _ARRAY:
        item_kind, items = struct.unpack("<IQ", handle.read(12))
        if item_kind in _FIXED_SIZES:
            handle.seek(items * _FIXED_SIZES[item_kind], 1)
        else:
            for _ in range(items):
                _skip_value(handle, item_kind)
    else:
        handle.seek(_FIXED_SIZES[kind], 1)


def _read_vocab_fields(path: Path) -> dict[str, Any]:
    """The tokenizer fields of a GGUF file: model, pre, tokens, token_type, merges, special ids."""
    keys = {f"tokenizer.ggml.{key}" for key in ("model", "pre", "tokens", "token_type", "merges", "add_bos_token")}
    keys |= {f"tokenizer.ggml.{role}_token_id" for role in _SPECIAL_IDS} | {"tokenizer.chat_template"}
    found = _read_metadata(path, keys)

    def value(key: str, default: Any = None) -> Any:
        return found.get(f"tokenizer.ggml.{key}", default)

    fields = {key: value(key) for key in ("model", "tokens", "token_type")}
    missing = [key for key, present in fields.items() if present is None]
    if missing:
        raise UnsupportedGGUFVocabulary(f"{path}: no tokenizer.ggml.{missing[0]} field (not a GGUF vocabulary?)")
    fields.update(pre=value("pre", "default"), merges=value("merges", []), add_bos_token=value("add_bos_token"))
    fields["chat_template"] = found.get("tokenizer.chat_template")
    fields.update({role: value(f"{role}_token_id") for role in _SPECIAL_IDS})
    return fields


def _read_metadata(path: Path, keys: set[str]) -> dict[str, Any]:
    """The values of ``keys`` in the GGUF file's metadata (strings, numbers, lists of either),
    decoded in one pass over the header (which ends once all are found); every other value is
    skipped unread. The ``gguf`` package's reader decodes every element of every field through
    numpy views: ~3 minutes for Gemma-4's 262k tokens and 514k merges on a busy machine, against
    seconds here."""
    found: dict[str, Any] = {}
    with open(path, "rb") as handle:
        magic, _version, _tensors, count = struct.unpack("<4sIQQ", handle.read(24))
        if magic != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (starts with {magic!r})")
        for _ in range(count):
            key = _read_string(handle)
            (kind,) = struct.unpack("<I", handle.read(4))
            if key in keys:
                found[key] = _read_value(handle, kind)
                if len(found) == len(keys):
                    break
            else:
                _skip_value(handle, kind)
    return found


def _read_value(handle: IO[bytes], kind: int) -> Any:
    """One metadata value of GGUF type ``kind``: a str, a number, a bool or a list of them."""
    if kind == _STRING:
        (length,) = struct.unpack("<Q", handle.read(8))
        return handle.read(length).decode("utf-8")
    if kind == _ARRAY:
        item_kind, items = struct.unpack("<IQ", handle.read(12))
        if item_kind in _FIXED_SIZES:
            code = _STRUCT_CODES[item_kind]
            return list(struct.unpack(f"<{items}{code}", handle.read(items * _FIXED_SIZES[item_kind])))
        return [_read_value(handle, item_kind) for _ in range(items)]
    (number,) = struct.unpack(f"<{_STRUCT_CODES[kind]}", handle.read(_FIXED_SIZES[kind]))
    return number


def _bpe(fields: dict[str, Any], byte_fallback: bool) -> Any:
    """The BPE model of the vocabulary; a merge "a b" splits at its first space after position 0."""
    from tokenizers import models

    merges = []
    for merge in fields["merges"]:
        cut = merge.find(" ", 1)
        merges.append((merge[:cut], merge[cut + 1 :]))
    vocab = {token: index for index, token in enumerate(fields["tokens"])}
    unk = fields["tokens"][fields["unknown"]] if fields.get("unknown") is not None else None
    return models.BPE(vocab=vocab, merges=merges, unk_token=unk, byte_fallback=byte_fallback, fuse_unk=byte_fallback)


def _configure_byte_level(backend: Any, splits: tuple[str, ...]) -> None:
    from tokenizers import Regex, decoders, pre_tokenizers

    pieces = [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in splits]
    pieces.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(pieces)
    backend.decoder = decoders.ByteLevel()


def _configure_spm_style(backend: Any) -> None:
    """Spaces become '▁' before BPE runs over each line; newline runs are pieces of their own."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    backend.normalizer = normalizers.Replace(" ", "\u2581")
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n+"), behavior="isolated")
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])


def _add_whole_tokens(backend: Any, tokens: list[str], types: list[int]) -> None:
    """Control tokens become special tokens, user-defined ones tokens matched whole in raw text."""
    from tokenizers import AddedToken

    added = [
        AddedToken(token, special=kind == _CONTROL, normalized=False)
        for token, kind in zip(tokens, types)
        if kind in (_CONTROL, _USER_DEFINED)
    ]
    backend.add_tokens(added)


def _prepend_bos(backend: Any, bos: str, bos_id: int) -> None:
    from tokenizers import processors

    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, bos_id)]
    )
