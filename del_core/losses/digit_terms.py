"""Per-position auxiliary terms on digit logits (pure tensor functions).

Every function takes ``digit_logits`` [N, 10] (the logits of the tokens '0'..'9' at N positions,
floating point; the caller chooses the compute dtype), the target digit ``target`` [N] (int64,
0..9; entries at positions the caller masks out may hold any value in 0..9) and returns the term
per position, shape [N]. The vocab-parallel path reuses them after reassembling the digit logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _digits_like(x: torch.Tensor) -> torch.Tensor:
    """0..9 made on x's device (a kernel, not a host-to-device copy)."""
    return torch.arange(10, device=x.device, dtype=x.dtype)


def del_term(digit_logits: torch.Tensor, target: torch.Tensor, place_value: torch.Tensor) -> torch.Tensor:
    """DEL: ``u * sum_d softmax(z)_d * BCE_with_logits(z_d, 1[d == y])`` (softmax not detached)."""
    # A comparison, not F.one_hot: one_hot checks the class range on the host (a sync on CPU tensors).
    onehot = (target.unsqueeze(-1) == torch.arange(10, device=target.device)).to(digit_logits.dtype)
    bce = F.binary_cross_entropy_with_logits(digit_logits, onehot, reduction="none")
    q = torch.softmax(digit_logits, dim=-1)
    return place_value.to(digit_logits.dtype) * (q * bce).sum(-1)


def ntl_was_term(digit_logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """NTL-WAS: ``sum_d softmax(z)_d * |y - d|`` (Wasserstein-1 distance to the target digit)."""
    distance = (target.to(digit_logits.dtype).unsqueeze(-1) - _digits_like(digit_logits)).abs()
    return (torch.softmax(digit_logits, dim=-1) * distance).sum(-1)


def ntl_mse_term(digit_logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """NTL-MSE: ``(sum_d softmax(z)_d * d - y)^2``."""
    expected = (torch.softmax(digit_logits, dim=-1) * _digits_like(digit_logits)).sum(-1)
    return (expected - target.to(digit_logits.dtype)) ** 2


def dist2_term(digit_logits: torch.Tensor, target: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """DIST2: ``KL(t || softmax(z))`` with the soft target ``t = softmax_d(-(y - d)^2 / tau)``."""
    distance = target.to(digit_logits.dtype).unsqueeze(-1) - _digits_like(digit_logits)
    log_t = torch.log_softmax(-(distance**2) / tau, dim=-1)
    log_q = torch.log_softmax(digit_logits, dim=-1)
    return (log_t.exp() * (log_t - log_q)).sum(-1)


def digit_entropy(digit_logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of ``softmax(z[D])`` per position, [N]."""
    log_q = torch.log_softmax(digit_logits, dim=-1)
    return -(log_q.exp() * log_q).sum(-1)
