"""A synthetic digit vocabulary and batches for exact loss tests.

Digit ids are out of order and not contiguous, so any code that assumes ``'0'..'9'`` are ids
0..9 or consecutive fails. ``encode`` maps text to ids: digits and '.' to the vocabulary, '_' to
-100 (ignored), anything else to ``OTHER``.
"""

from __future__ import annotations

import torch

from del_core import DigitVocab
from del_core.losses import build_loss_for_model

DIGITS = (40, 12, 33, 7, 25, 18, 3, 29, 50, 21)
POINT = 9
OTHER = 60
VOCAB = DigitVocab(DIGITS, POINT)
V = 64  # vocabulary size of the toy logits
H = 5  # hidden size of the toy cost embedding / LM head
TEXTS = ["ab12.5cd", "3x.75_9y", "zz100.1z", "no_digit"]


def encode(text: str) -> list[int]:
    out = []
    for ch in text:
        if ch.isdigit():
            out.append(DIGITS[int(ch)])
        elif ch == ".":
            out.append(POINT)
        elif ch == "_":
            out.append(-100)
        else:
            out.append(OTHER)
    return out


def make_batch(seed: int = 0, texts=TEXTS, dtype=torch.float64, scale: float = 3.0):
    """(logits [B, T, V], labels [B, T]) with seeded random logits."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor([encode(t) for t in texts])
    logits = (scale * torch.randn(*labels.shape, V, generator=g, dtype=torch.float64)).to(dtype)
    return logits, labels


def cost_embedding(seed: int = 1) -> torch.Tensor:
    return torch.randn(V, H, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def build(name: str, **kw):
    """``build_loss(name, VOCAB, ...)``, with the toy cost embedding as the LM-head weight (EMO's);
    NTIL without Gumbel noise unless ``noise_scale`` is given (two calls compare equal only then)."""
    if name == "ntil":
        kw.setdefault("noise_scale", 0.0)
    return build_loss_for_model(name, VOCAB, head_weight=cost_embedding, **kw)
