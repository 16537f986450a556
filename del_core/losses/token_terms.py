"""Per-token loss terms that replace CE (pure tensor functions).

``ce`` is the per-token cross-entropy [N] (see :mod:`.statistics`). Every function returns a value
per token, [N], 0 at ignored positions.
"""

from __future__ import annotations

import torch


def mixce_from_ce(ce: torch.Tensor, eta: float = 0.5) -> torch.Tensor:
    """MixCE per token from the per-token CE: ``-(eta + (1 - eta) * detach(p)) * log p``, p = exp(-ce)."""
    p = torch.exp(-ce.detach())
    return (eta + (1.0 - eta) * p) * ce


def emo_from_ce(
    ce: torch.Tensor,
    expected: torch.Tensor,
    target_embedding: torch.Tensor,
    valid: torch.Tensor,
    eps: float = 1e-15,
) -> torch.Tensor:
    """EMO per token: ``0.5 * (ce + detach(ce / (emo + eps)) * emo)`` (DEL_SPEC.md section 4).

    ``emo = 1 - <E[y], E^T q - detach(q_y) E[y]>`` with q the full softmax, from the statistics
    ``expected = q @ E`` [N, H] and ``target_embedding = E[y]`` [N, H] of the frozen, row-normalised
    cost embedding E; ``q_y = exp(-ce)``. ``valid`` [N] masks ignored positions.
    """
    q_target = torch.exp(-ce.detach())
    moved = expected - q_target.unsqueeze(-1) * target_embedding
    emo = 1.0 - (target_embedding * moved).sum(-1)
    per_token = 0.5 * (ce + (ce / (emo + eps)).detach() * emo)
    return torch.where(valid, per_token, torch.zeros_like(per_token))
