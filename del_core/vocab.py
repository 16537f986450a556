"""Number-token vocabulary: the ids of the tokens that write digits, grouped by width, and '.'.

DEL and the digit-level baselines choose, at every position of a number, among the number tokens
of the target's width. Two families of tokenizers are supported:

* "single-digit" (Qwen2, DeepSeek, Llama-2/CodeLlama/Mistral SentencePiece, Phi-3): every digit
  is its own token; the ten tokens '0'..'9' are the whole number vocabulary (the paper's setting).
* "multi-digit" (Llama-3): digit runs are written in tokens of 1..K digits, and for every width
  w <= K all 10^w strings '0..0'..'9..9' are tokens (1,110 number tokens for K = 3). The losses
  use the extension of ``docs/number_tokens.md``, which reduces exactly to the paper's on the
  first family.

Tokenizers whose number tokens are an incomplete or space-glued set (GPT-2's merges) are refused
with :class:`MultiDigitVocabularyError`, which says why. Every accepted vocabulary is checked by
encoding real numbers (:data:`PROBE_TEXT`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

DIGIT_TEXTS = tuple("0123456789")
POINT_TEXT = "."
SINGLE_DIGIT = "single-digit"
MULTI_DIGIT = "multi-digit"
# The widest number token a vocabulary may have (C = 10 + ... + 10^K columns stay small).
MAX_NUMBER_WIDTH = 4

# Text whose encoding shows how a tokenizer splits numbers: long integers, decimals, a leading
# point, a thousands separator, numbers after spaces, at line start and inside words.
PROBE_TEXT = (
    "Total: 1234567890 apples cost $3.14159 each, i.e. 0.5 + .75 = 1.25;\n"
    "12,345 people in 2026 paid 987654321 or 100.125 x7 -42\n9876"
)

# Device caches of the id tensors: (kind, ids, device) -> tensor (a host-to-device copy per loss
# call would stall the CUDA stream).
_ID_TENSORS: dict[tuple[str, tuple[int, ...], torch.device], torch.Tensor] = {}
# DigitVocab.id_lookup's cache: (number ids, device) -> NumberLookup.
_LOOKUPS: dict[tuple[tuple[int, ...], torch.device], NumberLookup] = {}

# Marks that tokenizers put in front of a token to say "a space precedes" (SentencePiece,
# byte-level BPE); they are not part of the number.
_SPACE_MARKS = ("\u2581", "\u0120", " ")


class MultiDigitVocabularyError(ValueError):
    """The tokenizer merges digits in a way no loss here can score (incomplete or space-glued
    number tokens, irregular splits); ``examples`` lists (id, text) of such tokens."""

    def __init__(self, message: str, examples: Sequence[tuple[int, str]]):
        super().__init__(message)
        self.family = MULTI_DIGIT
        self.examples = list(examples)


@dataclass(frozen=True)
class NumberLookup:
    """Device tensors mapping token ids to number-token columns (all int64).

    sorted_ids [C]:     the number ids in increasing order (for ``torch.searchsorted``).
    sorted_columns [C]: the column in ``DigitVocab.number_ids`` of each sorted id.
    column_width [C]:   the width w of each column's token.
    column_value [C]:   the value of each column's token (0..10^w - 1).
    """

    sorted_ids: torch.Tensor
    sorted_columns: torch.Tensor
    column_width: torch.Tensor
    column_value: torch.Tensor


@dataclass(frozen=True)
class DigitVocab:
    """The number tokens of a tokenizer and its point token '.'.

    digit_ids: the ten ids of '0'..'9', in that order (the width-1 tokens).
    point_id:  the id of '.'.
    name:      free text naming where the ids came from.
    wide_ids:  for widths w = 2..K, the 10^w ids of the width-w tokens ordered by value
               (``wide_ids[0][62]`` is the id of '62', ``wide_ids[1][62]`` that of '062'); empty
               for a single-digit vocabulary.
    grouping:  how the tokenizer splits a digit run, as found by encoding :data:`PROBE_TEXT`.
    family:    ``"single-digit"`` (K = 1) or ``"multi-digit"`` (K > 1), derived.
    """

    digit_ids: tuple[int, ...]
    point_id: int
    name: str = ""
    wide_ids: tuple[tuple[int, ...], ...] = ()
    grouping: str = "one digit per token"
    family: str = field(init=False)

    def __post_init__(self) -> None:
        ids = tuple(int(i) for i in self.digit_ids)
        if len(ids) != 10:
            raise ValueError(f"digit_ids must hold 10 ids ('0'..'9'), got {len(ids)}: {ids}")
        wide = tuple(tuple(int(i) for i in group) for group in self.wide_ids)
        for width, group in enumerate(wide, start=2):
            if len(group) != 10**width:
                raise ValueError(f"wide_ids[{width - 2}] must hold the {10**width} width-{width} ids, got {len(group)}")
        if 1 + len(wide) > MAX_NUMBER_WIDTH:
            raise ValueError(f"number tokens of up to {MAX_NUMBER_WIDTH} digits are supported, got {1 + len(wide)}")
        every = ids + sum(wide, ()) + (int(self.point_id),)
        if len(set(every)) != len(every):
            raise ValueError(f"number ids and point id must be distinct, got digits {ids} and point {self.point_id}")
        if min(every) < 0:
            raise ValueError(f"token ids must be >= 0, got digits {ids}, point {self.point_id}")
        object.__setattr__(self, "digit_ids", ids)
        object.__setattr__(self, "wide_ids", wide)
        object.__setattr__(self, "point_id", int(self.point_id))
        object.__setattr__(self, "family", MULTI_DIGIT if wide else SINGLE_DIGIT)

    @property
    def multi_digit(self) -> bool:
        return self.family == MULTI_DIGIT

    @property
    def max_width(self) -> int:
        """K, the widest number token."""
        return 1 + len(self.wide_ids)

    @property
    def number_ids(self) -> tuple[int, ...]:
        """The C = 10 + ... + 10^K number-token ids, by width then value (the loss's columns)."""
        return self.digit_ids + sum(self.wide_ids, ())

    @property
    def group_offsets(self) -> tuple[int, ...]:
        """Column offsets o_1..o_{K+1} of the width groups in :attr:`number_ids` (0, 10, 110, ...)."""
        offsets = [0]
        for width in range(1, self.max_width + 1):
            offsets.append(offsets[-1] + 10**width)
        return tuple(offsets)

    def number_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """int64 [C]: :attr:`number_ids` on ``device``, cached per device (read-only)."""
        return _cached_ids("numbers", self.number_ids, device)

    def id_lookup(self, device: torch.device | str | None = None) -> NumberLookup:
        """The :class:`NumberLookup` of this vocabulary on ``device``, made once per device."""
        key = (self.number_ids, torch.device(device) if device is not None else torch.device("cpu"))
        cached = _LOOKUPS.get(key)
        if cached is None:
            ids = torch.tensor(self.number_ids, dtype=torch.long)
            order = torch.argsort(ids)
            widths = torch.cat([torch.full((10**w,), w, dtype=torch.long) for w in range(1, self.max_width + 1)])
            values = torch.cat([torch.arange(10**w, dtype=torch.long) for w in range(1, self.max_width + 1)])
            cached = _LOOKUPS[key] = NumberLookup(*(t.to(key[1]) for t in (ids[order], order, widths, values)))
        return cached

    def check_fits(self, vocab_size: int) -> None:
        """Raise if a number or point id does not index a logit row of an LM head of ``vocab_size``."""
        too_big = [i for i in self.number_ids + (self.point_id,) if i >= vocab_size]
        if too_big:
            raise ValueError(
                f"number/point ids {too_big[:10]} of vocabulary {self.name or '<unnamed>'} are outside "
                f"the logits' vocabulary dimension V={vocab_size}"
            )

    def describe(self) -> str:
        """One line for logs: the family, the widths and the ids of '0'..'9' and '.'."""
        widths = f"{len(self.number_ids)} number tokens of widths 1..{self.max_width}, {self.grouping}"
        if not self.multi_digit:
            widths = "10 number tokens, one digit per token"
        return f"{self.family} ({widths}): '0'..'9' = {list(self.digit_ids)}, '.' = {self.point_id}"

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, name: str | None = None) -> DigitVocab:
        """Find the number tokens and the point of a Hugging Face tokenizer (fast or slow).

        The ids come from the vocabulary (tokens whose text is exactly 1..K ASCII digits, or '.'),
        and are then checked by encoding :data:`PROBE_TEXT`: every digit must come out inside one
        of the number tokens, and the digit runs must be split in fixed groups. Raises
        :class:`MultiDigitVocabularyError` for vocabularies whose number tokens no loss here can
        score (see the module doc), ``ValueError`` when a digit or the point has no token.
        """
        name = name or getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        widths = _number_widths(tokenizer)
        lookup = _single_char_tokens(tokenizer, DIGIT_TEXTS + (POINT_TEXT,))
        missing = [c for c in DIGIT_TEXTS + (POINT_TEXT,) if c not in lookup]
        if missing:
            raise ValueError(f"tokenizer {name!r} has no token whose text is exactly {missing}")
        wide = _wide_groups(tokenizer, widths, name)
        vocab = cls(tuple(lookup[c] for c in DIGIT_TEXTS), lookup[POINT_TEXT], name, wide)
        grouping = _check_encoding(tokenizer, vocab, name)
        return cls(vocab.digit_ids, vocab.point_id, name, wide, grouping)


def _cached_ids(kind: str, ids: tuple[int, ...], device) -> torch.Tensor:
    key = (kind, ids, torch.device(device) if device is not None else torch.device("cpu"))
    tensor = _ID_TENSORS.get(key)
    if tensor is None:
        tensor = _ID_TENSORS[key] = torch.tensor(ids, dtype=torch.long, device=key[2])
    return tensor


def _token_text(tokenizer: Any, token_id: int) -> str:
    """The text one token stands for, space marks removed."""
    text = tokenizer.decode([token_id], clean_up_tokenization_spaces=False)
    return text.strip().lstrip("".join(_SPACE_MARKS))


def _probe_ids(tokenizer: Any, text: str = PROBE_TEXT) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _number_widths(tokenizer: Any) -> dict[int, list[tuple[int, str, bool]]]:
    """Width -> [(id, digits, glued to a space mark)] of every vocabulary token whose text is
    ASCII digits, with or without a leading space mark."""
    found: dict[int, list[tuple[int, str, bool]]] = {}
    for token, tid in tokenizer.get_vocab().items():
        bare = token.lstrip("".join(_SPACE_MARKS))
        if bare and len(bare) <= 32 and bare.isascii() and bare.isdigit():
            found.setdefault(len(bare), []).append((int(tid), bare, bare != token))
    return found


def _wide_groups(tokenizer: Any, widths: dict[int, list[tuple[int, str, bool]]], name: str) -> tuple:
    """The width-2..K id groups (ordered by value), or a refusal naming what makes them unusable."""
    multi = {w: tokens for w, tokens in widths.items() if w >= 2}
    if not multi:
        return ()
    top = max(multi)
    spaced = [(tid, text) for w in multi for tid, text, glued in multi[w] if glued]
    bare = {w: {text: tid for tid, text, glued in multi.get(w, []) if not glued} for w in range(2, top + 1)}
    incomplete = [w for w in range(2, top + 1) if len(bare[w]) != 10**w]
    if incomplete or spaced or top > MAX_NUMBER_WIDTH:
        coverage = ", ".join(f"width {w}: {len(bare[w])} of {10**w}" for w in range(2, min(top, 5) + 1))
        reasons = [f"its multi-digit number tokens are not complete sets of values ({coverage}"]
        reasons[0] += f"; up to width {top})" if top > 5 else ")"
        if spaced:
            example = " " + spaced[0][1]
            reasons.append(f"{len(spaced)} number tokens carry a leading space (e.g. {example!r}, id {spaced[0][0]})")
        examples = sorted({(tid, text) for w in multi for tid, text, _ in multi[w][:3]})[:5]
        raise MultiDigitVocabularyError(
            f"tokenizer {name!r} is an irregular multi-digit vocabulary: {'; '.join(reasons)}. "
            "Its BPE merges split digit runs by merge rank (e.g. 1234567 -> 123 45 67), so the "
            "width and place of a number token are not fixed by the number and there is no full "
            "set of classes to score it against; DEL, NTL and DIST2 are not supported for it "
            "(docs/number_tokens.md). Use the 'mle' or 'mixce' loss with this tokenizer.",
            examples,
        )
    groups = []
    for width in range(2, top + 1):
        texts = [str(value).zfill(width) for value in range(10**width)]
        group = tuple(bare[width][text] for text in texts)
        wrong = next(((tid, text) for tid, text in zip(group, texts) if _token_text(tokenizer, tid) != text), None)
        if wrong is not None:
            shown = _token_text(tokenizer, wrong[0])
            raise ValueError(f"tokenizer {name!r}: token id {wrong[0]} decodes to {shown!r}, not {wrong[1]!r}")
        groups.append(group)
    return tuple(groups)


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


def _check_encoding(tokenizer: Any, vocab: DigitVocab, name: str) -> str:
    """Encode the probe text: every digit must come out inside a number token of ``vocab`` and
    every bare point as the point token, and each digit run must be split in the same fixed way.
    Returns that way, in words."""
    widths = {tid: len(text) for tid, text in _number_texts(vocab).items()}
    seen_digits: set[str] = set()
    split_widths: list[list[int]] = []
    run: list[int] = []
    for tid in _probe_ids(tokenizer) + [-1]:
        if tid in widths:
            run.append(widths[tid])
            if widths[tid] == 1:
                seen_digits.add(DIGIT_TEXTS[vocab.digit_ids.index(tid)])
            continue
        if run:
            split_widths.append(run)
            run = []
        if tid < 0 or tid == vocab.point_id:
            continue
        text = _token_text(tokenizer, tid)
        if any(ch in DIGIT_TEXTS for ch in text):
            raise ValueError(
                f"tokenizer {name!r} encodes a digit as the token {text!r} (id {tid}), not as one of "
                f"its {len(widths)} number tokens; numbers must be written in digit-only tokens"
            )
        # A point glued to a space (Qwen2's ' .', SentencePiece's '\u2581.') is another token,
        # not a number's point; only a second bare '.' token would be ambiguous.
        if tokenizer.convert_ids_to_tokens(tid) == POINT_TEXT:
            raise ValueError(f"tokenizer {name!r} has two bare '.' tokens: ids {vocab.point_id} and {tid}")
    if not vocab.multi_digit:
        missing = sorted(set(DIGIT_TEXTS) - seen_digits)
        if missing:
            raise ValueError(f"tokenizer {name!r}: encoding {PROBE_TEXT!r} did not produce the digit tokens {missing}")
        return "one digit per token"
    return _grouping(split_widths, vocab.max_width, name)


def _number_texts(vocab: DigitVocab) -> dict[int, str]:
    texts = dict(zip(vocab.digit_ids, DIGIT_TEXTS))
    for width, group in enumerate(vocab.wide_ids, start=2):
        texts.update((tid, str(value).zfill(width)) for value, tid in enumerate(group))
    return texts


def _grouping(split_widths: list[list[int]], width: int, name: str) -> str:
    """The fixed grouping all probe digit runs follow (left to right or right to left in groups of
    ``width``), or a refusal: an irregular split has no place structure to score."""

    def groups(total: int, left_to_right: bool) -> list[int]:
        sizes = [width] * (total // width) + ([total % width] if total % width else [])
        return sizes if left_to_right else sizes[::-1]

    for left_to_right, words in ((True, "left to right"), (False, "right to left")):
        if all(run == groups(sum(run), left_to_right) for run in split_widths):
            return f"{words} in groups of {width}"
    irregular = next(run for run in split_widths if run != groups(sum(run), True))
    raise MultiDigitVocabularyError(
        f"tokenizer {name!r} splits digit runs irregularly (a {sum(irregular)}-digit run became tokens of "
        f"widths {irregular}); DEL, NTL and DIST2 need a fixed split (docs/number_tokens.md)",
        [],
    )
