"""Per-position auxiliary terms on number-token logits (pure tensor functions).

The term functions take ``group_logits`` [N, G]: the logits of the G = 10^w number tokens of one
width w at N positions, column c being the token of value c (for digits, G = 10 and the columns
are '0'..'9'); floating point, the caller chooses the compute dtype. ``target`` [N] (int64,
0..G-1; entries at positions the caller masks out may hold any value in that range) is the
target token's value. They return the term per position, shape [N]. :func:`by_width` applies a
term to the [N, C] logits of all number tokens, each position scored within its target's width
group (docs/number_tokens.md); on a single-digit vocabulary that is the term itself. The
vocab-parallel path reuses them after reassembling the number-token logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

# term(group_logits [N, G], target [N], width w) -> [N]
GroupTerm = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def _values_like(x: torch.Tensor) -> torch.Tensor:
    """0..G-1 made on x's device (a kernel, not a host-to-device copy)."""
    return torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)


def del_term(group_logits: torch.Tensor, target: torch.Tensor, place_value: torch.Tensor) -> torch.Tensor:
    """DEL: ``u * sum_c softmax(z)_c * BCE_with_logits(z_c, 1[c == y])`` (softmax not detached)."""
    # A comparison, not F.one_hot: one_hot checks the class range on the host (a sync on CPU tensors).
    classes = torch.arange(group_logits.shape[-1], device=target.device)
    onehot = (target.unsqueeze(-1) == classes).to(group_logits.dtype)
    bce = F.binary_cross_entropy_with_logits(group_logits, onehot, reduction="none")
    q = torch.softmax(group_logits, dim=-1)
    return place_value.to(group_logits.dtype) * (q * bce).sum(-1)


def ntl_was_term(group_logits: torch.Tensor, target: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """NTL-WAS: ``sum_c softmax(z)_c * |y - c| * scale`` (Wasserstein-1 distance to the target
    value; ``scale`` = 10^-(w-1) measures it in units of a width-w token's leading place)."""
    distance = (target.to(group_logits.dtype).unsqueeze(-1) - _values_like(group_logits)).abs()
    if scale != 1.0:
        distance = distance * scale
    return (torch.softmax(group_logits, dim=-1) * distance).sum(-1)


def ntl_mse_term(group_logits: torch.Tensor, target: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """NTL-MSE: ``((sum_c softmax(z)_c * c - y) * scale)^2``."""
    expected = (torch.softmax(group_logits, dim=-1) * _values_like(group_logits)).sum(-1)
    error = expected - target.to(group_logits.dtype)
    if scale != 1.0:
        error = error * scale
    return error**2


def dist2_term(group_logits: torch.Tensor, target: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """DIST2: ``KL(t || softmax(z))`` with the soft target ``t = softmax_c(-(y - c)^2 / tau)``."""
    distance = target.to(group_logits.dtype).unsqueeze(-1) - _values_like(group_logits)
    log_t = torch.log_softmax(-(distance**2) / tau, dim=-1)
    log_q = torch.log_softmax(group_logits, dim=-1)
    return (log_t.exp() * (log_t - log_q)).sum(-1)


def digit_entropy(group_logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of ``softmax(z)`` over the group per position, [N]."""
    log_q = torch.log_softmax(group_logits, dim=-1)
    return -(log_q.exp() * log_q).sum(-1)


def leading_place_scale(width: int) -> float:
    """10^-(w-1): a width-w token's value in units of its leading place (1 for a digit)."""
    return 10.0 ** -(width - 1)


def by_width(
    number_logits: torch.Tensor,
    width: torch.Tensor,
    value: torch.Tensor,
    group_offsets: Sequence[int],
    term: GroupTerm,
) -> torch.Tensor:
    """``term`` at every position, on the logits of its target's width group.

    ``number_logits`` [N, C] in the column order of ``DigitVocab.number_ids``; ``width`` [N]
    int64 (w >= 1 at number-token positions, 0 elsewhere); ``value`` [N] int64 the target value;
    ``group_offsets`` the K + 1 column offsets (``DigitVocab.group_offsets``). Returns [N] in the
    term's dtype, 0 (or False) at positions of no width. Each group is scored at all N positions
    and selected with a mask: O(N x C) work and no data-dependent shapes (no host sync)."""
    out = None
    for w in range(1, len(group_offsets)):
        at = width == w
        group = number_logits[:, group_offsets[w - 1] : group_offsets[w]]
        scored = term(group, torch.where(at, value, torch.zeros_like(value)), w)
        out = torch.where(at, scored, torch.zeros_like(scored) if out is None else out)
    return out


def number_entropy(number_logits: torch.Tensor, width: torch.Tensor, group_offsets: Sequence[int]) -> torch.Tensor:
    """[N] entropy (nats) of each position's width group (0 at positions of no width)."""
    return by_width(number_logits, width, torch.zeros_like(width), group_offsets, lambda z, _y, _w: digit_entropy(z))


def number_hits(
    number_logits: torch.Tensor, width: torch.Tensor, value: torch.Tensor, group_offsets: Sequence[int]
) -> torch.Tensor:
    """[N] bool: the argmax of the position's width group is the target value (False elsewhere)."""
    return by_width(number_logits, width, value, group_offsets, lambda z, y, _w: z.argmax(-1) == y)
