"""A synthetic multi-digit number vocabulary (Llama-3-like) for exact loss tests.

:func:`make_number_vocab` places the 10 + ... + 10^K number tokens and the point at a seeded
permutation of the ids of a vocabulary of ``V``, so no code can rely on ids being contiguous or in
value order. ``encode`` writes digit runs left to right in groups of K (as Llama-3 does), '.' as
the point, '_' as -100 (ignored) and any other character as one "other" token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from del_core import DigitVocab


@dataclass(frozen=True)
class NumberVocabCase:
    vocab: DigitVocab
    other: int  # the id of every non-number character
    V: int

    @property
    def width(self) -> int:
        return self.vocab.max_width

    def id_of(self, digits: str) -> int:
        """The id of the number token written ``digits`` (1..K characters)."""
        w = len(digits)
        return self.vocab.number_ids[self.vocab.group_offsets[w - 1] + int(digits)]

    def tokens(self, text: str) -> list[str]:
        """``text`` split as the tokenizer would: digit runs in left-to-right groups of K."""
        out = []
        for run in re.findall(r"[0-9]+|.", text):
            if run.isdigit():
                out += [run[i : i + self.width] for i in range(0, len(run), self.width)]
            else:
                out.append(run)
        return out

    def encode(self, text: str) -> list[int]:
        ids = []
        for token in self.tokens(text):
            if token.isdigit():
                ids.append(self.id_of(token))
            elif token == ".":
                ids.append(self.vocab.point_id)
            elif token == "_":
                ids.append(-100)
            else:
                ids.append(self.other)
        return ids


def make_number_vocab(width: int = 3, V: int = 1200, seed: int = 0) -> NumberVocabCase:
    """Number tokens of widths 1..``width`` and a point at random distinct ids below ``V``."""
    n_numbers = sum(10**w for w in range(1, width + 1))
    if n_numbers + 2 > V:
        raise ValueError(f"V={V} cannot hold {n_numbers} number tokens, a point and another token")
    ids = torch.randperm(V, generator=torch.Generator().manual_seed(seed)).tolist()
    groups, at = [], 10
    for w in range(2, width + 1):
        groups.append(tuple(ids[at : at + 10**w]))
        at += 10**w
    vocab = DigitVocab(tuple(ids[:10]), ids[at], name=f"toy-k{width}", wide_ids=tuple(groups))
    return NumberVocabCase(vocab, ids[at + 1], V)
