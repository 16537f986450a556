"""Per-token loss terms that replace CE (pure tensor functions).

``ce`` is the per-token cross-entropy [N] (see :mod:`.cross_entropy`); ``logits`` [N, V] in the
compute dtype, ``target`` [N] int64 with -100 at ignored positions. Every function returns a value
per token, [N], 0 at ignored positions.
"""
from __future__ import annotations

import torch

from .cross_entropy import IGNORE_INDEX


def mixce_from_ce(ce: torch.Tensor, eta: float = 0.5) -> torch.Tensor:
    """MixCE per token from the per-token CE: ``-(eta + (1 - eta) * detach(p)) * log p``, p = exp(-ce)."""
    p = torch.exp(-ce.detach())
    return (eta + (1.0 - eta) * p) * ce


def emo_from_ce(
    logits: torch.Tensor,
    target: torch.Tensor,
    ce: torch.Tensor,
    cost_embedding: torch.Tensor,
    eps: float = 1e-15,
) -> torch.Tensor:
    """EMO per token: ``0.5 * (ce + detach(ce / (emo + eps)) * emo)`` (DEL_SPEC.md section 4).

    ``emo = 1 - <E[y], E^T q - detach(q_y) E[y]>`` with q the full softmax and ``cost_embedding``
    E [V, H] the frozen, row-normalised LM-head weight (same dtype as ``logits``).
    """
    valid = target != IGNORE_INDEX
    safe_target = torch.where(valid, target, torch.zeros_like(target))
    q = torch.softmax(logits, dim=-1)
    q_target = q.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    e_target = cost_embedding[safe_target]
    expected = q @ cost_embedding
    emo = 1.0 - (e_target * (expected - q_target.detach().unsqueeze(-1) * e_target)).sum(-1)
    per_token = 0.5 * (ce + (ce / (emo + eps)).detach() * emo)
    return torch.where(valid, per_token, torch.zeros_like(per_token))
