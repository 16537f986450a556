"""Digit vocabulary: the ten digit token ids and the point id of a tokenizer.

DEL and the digit-level baselines need a ten-way digit choice at every position of a number.
That exists when the tokenizer writes every digit as its own token ("single-digit" family:
Qwen2, DeepSeek, Llama-2/CodeLlama/Mistral SentencePiece, Phi-3). Tokenizers that merge digits
("multi-digit" family: Llama-3's 1-3 digit chunks, GPT-2's irregular merges) are detected by
encoding real numbers and refused with :class:`MultiDigitVocabularyError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

DIGIT_TEXTS = tuple("0123456789")
POINT_TEXT = "."
SINGLE_DIGIT = "single-digit"
MULTI_DIGIT = "multi-digit"

# Text whose encoding shows how a tokenizer splits numbers: long integers, decimals, a leading
# point, a thousands separator, numbers after spaces, at line start and inside words.
PROBE_TEXT = (
    "Total: 1234567890 apples cost $3.14159 each, i.e. 0.5 + .75 = 1.25;\n"
    "12,345 people in 2026 paid 987654321 or 100.125 x7 -42\n9876"
)

# digit_tensor's cache: (digit ids, device) -> the int64 [10] tensor on that device.
_DIGIT_ID_TENSORS: dict[tuple[tuple[int, ...], torch.device], torch.Tensor] = {}

# Marks that tokenizers put in front of a token to say "a space precedes" (SentencePiece,
# byte-level BPE); they are not part of the number.
_SPACE_MARKS = ("\u2581", "\u0120", " ")


class MultiDigitVocabularyError(ValueError):
    """The tokenizer merges several digits into one token; DEL's ten-way digit choice is undefined."""

    def __init__(self, message: str, examples: Sequence[tuple[int, str]]):
        super().__init__(message)
        self.family = MULTI_DIGIT
        self.examples = list(examples)


@dataclass(frozen=True)
class DigitVocab:
    """Ids of the digit tokens '0'..'9' (in that order) and of the point token '.'.

    ``family`` is ``"single-digit"``; ``multi_digit`` is False (multi-digit tokenizers are refused,
    see :meth:`from_tokenizer`). ``name`` is free text naming where the ids came from.
    """

    digit_ids: tuple[int, ...]
    point_id: int
    family: str = SINGLE_DIGIT
    name: str = ""

    def __post_init__(self) -> None:
        ids = tuple(int(i) for i in self.digit_ids)
        if len(ids) != 10:
            raise ValueError(f"digit_ids must hold 10 ids ('0'..'9'), got {len(ids)}: {ids}")
        if len(set(ids + (int(self.point_id),))) != 11:
            raise ValueError(f"digit ids and point id must be 11 distinct ids, got {ids} and {self.point_id}")
        if min(ids + (int(self.point_id),)) < 0:
            raise ValueError(f"token ids must be >= 0, got digits {ids}, point {self.point_id}")
        object.__setattr__(self, "digit_ids", ids)
        object.__setattr__(self, "point_id", int(self.point_id))

    @property
    def multi_digit(self) -> bool:
        return self.family == MULTI_DIGIT

    def digit_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """int64 tensor [10] of the digit ids on ``device``, made once per device and cached (a
        host-to-device copy per loss call would stall the CUDA stream). Treat it as read-only."""
        key = (self.digit_ids, torch.device(device) if device is not None else torch.device("cpu"))
        tensor = _DIGIT_ID_TENSORS.get(key)
        if tensor is None:
            tensor = _DIGIT_ID_TENSORS[key] = torch.tensor(self.digit_ids, dtype=torch.long, device=key[1])
        return tensor

    def check_fits(self, vocab_size: int) -> None:
        """Raise if a digit or point id does not index a logit row of an LM head of ``vocab_size``."""
        too_big = [i for i in self.digit_ids + (self.point_id,) if i >= vocab_size]
        if too_big:
            raise ValueError(
                f"digit/point ids {too_big} of vocabulary {self.name or '<unnamed>'} are outside "
                f"the logits' vocabulary dimension V={vocab_size}"
            )

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, name: str | None = None) -> DigitVocab:
        """Find the digit and point ids of a Hugging Face tokenizer (fast or slow).

        The ids come from the vocabulary (tokens whose text is exactly one ASCII digit or '.'), and
        are then checked by encoding :data:`PROBE_TEXT`: every digit must come out as one of the
        ten tokens. Raises :class:`MultiDigitVocabularyError` when the tokenizer merges digits, and
        ``ValueError`` when a digit or the point has no token of its own.
        """
        name = name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        merged = _multi_digit_tokens(tokenizer)
        if merged:
            shown = ", ".join(f"{text!r} (id {tid})" for tid, text in merged[:5])
            raise MultiDigitVocabularyError(
                f"tokenizer {name!r} is a multi-digit vocabulary: encoding numbers gives tokens "
                f"holding several digits, e.g. {shown}. DEL, NTL and DIST2 need one token per digit "
                f"(a ten-way digit choice at each position), as in Qwen2/Qwen2.5, DeepSeek, "
                f"Llama-2/CodeLlama/Mistral and Phi-3 tokenizers; Llama-3 and GPT-2 style "
                f"tokenizers are not supported. Use the 'mle' or 'mixce' loss with this tokenizer.",
                merged,
            )
        lookup = _single_char_tokens(tokenizer, DIGIT_TEXTS + (POINT_TEXT,))
        missing = [c for c in DIGIT_TEXTS + (POINT_TEXT,) if c not in lookup]
        if missing:
            raise ValueError(f"tokenizer {name!r} has no token whose text is exactly {missing}")
        vocab = cls(tuple(lookup[c] for c in DIGIT_TEXTS), lookup[POINT_TEXT], SINGLE_DIGIT, name)
        _check_encoding(tokenizer, vocab, name)
        return vocab


def _token_text(tokenizer: Any, token_id: int) -> str:
    """The text one token stands for, space marks removed."""
    text = tokenizer.decode([token_id], clean_up_tokenization_spaces=False)
    return text.strip().lstrip("".join(_SPACE_MARKS))


def _probe_ids(tokenizer: Any) -> list[int]:
    return list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])


def _multi_digit_tokens(tokenizer: Any) -> list[tuple[int, str]]:
    """(id, text) of probe tokens that hold two or more ASCII digits."""
    found: dict[int, str] = {}
    for tid in _probe_ids(tokenizer):
        text = _token_text(tokenizer, tid)
        if sum(ch in DIGIT_TEXTS for ch in text) >= 2:
            found.setdefault(tid, text)
    return list(found.items())


def _single_char_tokens(tokenizer: Any, chars: Sequence[str]) -> dict[str, int]:
    """Map each char to the id of the vocabulary token whose text is exactly that char.

    A direct vocabulary lookup serves byte-level BPE and SentencePiece vocabularies, whose
    printable ASCII tokens are stored as themselves; otherwise the vocabulary is scanned.
    """
    vocab = tokenizer.get_vocab()
    found: dict[str, int] = {}
    for ch in chars:
        tid = vocab.get(ch)
        if tid is not None and _token_text(tokenizer, tid) == ch:
            found[ch] = int(tid)
    wanted = set(chars) - set(found)
    if wanted:
        for token, tid in vocab.items():
            if len(token) <= 3:
                text = tokenizer.convert_tokens_to_string([token])
                if text in wanted and text not in found:
                    found[text] = int(tid)
    return found


def _check_encoding(tokenizer: Any, vocab: DigitVocab, name: str) -> None:
    """Encode the probe text and check that every digit comes out as one of the ten digit tokens
    and every bare point as the point token."""
    known = dict(zip(vocab.digit_ids, DIGIT_TEXTS))
    known[vocab.point_id] = POINT_TEXT
    seen_digits = set()
    for tid in _probe_ids(tokenizer):
        if tid in known:
            seen_digits.add(known[tid])
            continue
        text = _token_text(tokenizer, tid)
        if any(ch in DIGIT_TEXTS for ch in text):
            raise ValueError(
                f"tokenizer {name!r} encodes a digit as the token {text!r} (id {tid}), not as one of "
                f"the digit tokens {vocab.digit_ids}; numbers must be written one digit per token"
            )
        # A point glued to a space (Qwen2's ' .', SentencePiece's '\u2581.') is another token,
        # not a number's point; only a second bare '.' token would be ambiguous.
        if tokenizer.convert_ids_to_tokens(tid) == POINT_TEXT:
            raise ValueError(f"tokenizer {name!r} has two bare '.' tokens: ids {vocab.point_id} and {tid}")
    missing = sorted(set(DIGIT_TEXTS) - seen_digits)
    if missing:
        raise ValueError(f"tokenizer {name!r}: encoding {PROBE_TEXT!r} did not produce the digit tokens {missing}")
