"""Token cross-entropy fused with the extraction of the digit logits.

One autograd function returns the per-token CE and the ten digit logits of every position. Its
backward writes a single [N, V] gradient: the softmax-minus-one-hot of CE, with the gradient of
the digit logits added into ten columns in place. Taking ``logits[:, digit_ids]`` with ordinary
indexing would instead allocate a second zero-filled [N, V] gradient and add the two, which costs
more than DEL's own arithmetic. Only the logits (held by the caller anyway) and the per-token
log-sum-exp are saved for backward; ``F.cross_entropy`` saves an [N, V] log-softmax besides.
"""
from __future__ import annotations

from typing import Optional

import torch

IGNORE_INDEX = -100


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half/bf16/fp32 input; float64 stays float64 (for gradcheck)."""
    return torch.promote_types(dtype, torch.float32)


class _CrossEntropyWithDigitLogits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, digit_ids: Optional[torch.Tensor]):
        dtype = compute_dtype(logits.dtype)
        valid = target != IGNORE_INDEX
        safe_target = torch.where(valid, target, torch.zeros_like(target))
        lse = torch.logsumexp(logits.to(dtype), dim=-1)
        target_logit = logits.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1).to(dtype)
        ce = torch.where(valid, lse - target_logit, torch.zeros_like(lse))
        digits = None
        if digit_ids is not None:
            digits = logits.index_select(-1, digit_ids).to(dtype)
        ctx.save_for_backward(logits, safe_target, valid, lse, digit_ids)
        return ce, digits

    @staticmethod
    def backward(ctx, grad_ce: Optional[torch.Tensor], grad_digits: Optional[torch.Tensor]):
        logits, safe_target, valid, lse, digit_ids = ctx.saved_tensors
        dtype = lse.dtype
        if grad_ce is None:
            grad = torch.zeros(logits.shape, dtype=dtype, device=logits.device)
        else:
            scale = torch.where(valid, grad_ce, torch.zeros_like(grad_ce)).unsqueeze(-1)
            # softmax(z) * g - onehot(y) * g, written into one fresh buffer.
            grad = torch.sub(logits, lse.unsqueeze(-1)).to(dtype).exp_().mul_(scale)
            grad.scatter_add_(-1, safe_target.unsqueeze(-1), -scale)
        if grad_digits is not None and digit_ids is not None:
            grad.index_add_(-1, digit_ids, grad_digits.to(dtype))
        return grad.to(logits.dtype), None, None


def cross_entropy_with_digit_logits(
    logits: torch.Tensor, target: torch.Tensor, digit_ids: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-token CE and digit logits.

    ``logits`` [N, V] any float dtype; ``target`` [N] int64, -100 = ignored; ``digit_ids`` [10]
    int64 or None. Returns ``ce`` [N] (0 at ignored positions) and ``digit_logits`` [N, 10] (None
    without ``digit_ids``), both in the compute dtype (fp32, or float64 for float64 logits).
    """
    return _CrossEntropyWithDigitLogits.apply(logits, target, digit_ids)
