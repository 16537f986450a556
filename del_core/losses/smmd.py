"""SMMD (Smooth Maximum Mean Discrepancy): a kernel distance between the predicted distribution
over the numeric sub-vocabulary and the one-hot target, plus a graph-smoothness term.

The numeric sub-vocabulary V_num holds the single tokens of the integers 0..max_value, ordered by
value (the released rule: ``str(v)`` encodes to exactly one token). On a :class:`DigitVocab` those
are the ten digits and, on a multi-digit vocabulary, the width-w tokens without a leading zero
('10'..'99', '100'..'999' on Llama-3): the index of a token in V_num is its value. SentencePiece
vocabularies (Llama-2, Mistral) encode "5" as two tokens, where the released rule finds no V_num;
here they get their ten digit tokens, found from the vocabulary as DEL finds them.

Kernel K [M, M] over the values (gaussian or laplace, after the distance squash), degrees
``deg = K 1`` and alpha; per position with a label in V_num, p = softmax(z[V_num]), r = p - onehot:

    L_mmd = r^T K r,   L_smooth = r^T (diag(deg) - K) r,   term = relu(L_mmd + alpha L_smooth)

(mode ``smmd``; ``mmd``: relu(L_mmd); ``smooth``: relu(alpha L_smooth)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import torch

from ..vocab import DigitVocab
from .base import Batch, DigitAuxLoss, LossNeeds

KERNELS = ("gaussian", "laplace")
MODES = ("smmd", "mmd", "smooth")
SQUASH_EPS = 1e-10  # the released code's guard in the squash's denominator


@dataclass(frozen=True)
class SMMDKernel:
    """The kernel of the values 0..M-1 and what the term needs from it (float64 [M, M] / [M])."""

    matrix: torch.Tensor
    degree: torch.Tensor
    alpha: float


def squashed_distances(values: torch.Tensor, squash_factor: float) -> torch.Tensor:
    """[M, M] |v_i - v_j|, squashed into [1, squash_factor] off the diagonal when squash_factor > 1:
    ``1 + (d - m)(sf - 1) / (M - m + 1e-10)`` with m / M the smallest non-zero / largest distance
    (unchanged for M <= 1, no non-zero distance, or M <= m)."""
    d = (values.unsqueeze(0) - values.unsqueeze(1)).abs()
    nonzero = d[d > 0]
    if squash_factor <= 1 or values.numel() <= 1 or nonzero.numel() == 0:
        return d
    low, high = nonzero.min(), d.max()
    if high <= low:
        return d
    squashed = 1.0 + (d - low) * (squash_factor - 1.0) / (high - low + SQUASH_EPS)
    return torch.where(d > 0, squashed, torch.zeros_like(d))


def smmd_kernel(
    values: torch.Tensor, kernel: str, sigmas: Sequence[float], squash_factor: float, alpha: Union[str, float]
) -> SMMDKernel:
    """The kernel of ``values`` [M] (float64): the mean over ``sigmas`` of exp(-d'^2 / (2 s^2))
    (gaussian) or exp(-|d'| / s) (laplace), clamped to [0, 1]; alpha ``"auto"`` = 0.5 / mean(deg)."""
    d = squashed_distances(values.double(), squash_factor)
    parts = [torch.exp(-(d**2) / (2 * s * s)) if kernel == "gaussian" else torch.exp(-d.abs() / s) for s in sigmas]
    matrix = torch.stack(parts).mean(0).clamp(0.0, 1.0)
    degree = matrix.sum(-1)
    chosen = 0.5 / float(degree.mean()) if alpha == "auto" else float(alpha)
    return SMMDKernel(matrix, degree, chosen)


def smmd_term(
    numeric_logits: torch.Tensor,
    target: torch.Tensor,
    matrix: torch.Tensor,
    degree: torch.Tensor,
    alpha: float,
    mode: str = "smmd",
) -> torch.Tensor:
    """[N] the SMMD term of ``numeric_logits`` [N, M] (logits over V_num) against ``target`` [N]
    (int64 indices 0..M-1); ``matrix`` [M, M] and ``degree`` [M] in the logits' dtype."""
    p = torch.softmax(numeric_logits, dim=-1)
    kp = p @ matrix
    index = target.unsqueeze(-1)
    p_t = p.gather(-1, index).squeeze(-1)
    mmd = (p * kp).sum(-1) + matrix.diagonal()[target] - 2.0 * kp.gather(-1, index).squeeze(-1)
    smooth = (degree * p * p).sum(-1) + degree[target] * (1.0 - 2.0 * p_t) - mmd
    if mode == "mmd":
        return torch.relu(mmd)
    if mode == "smooth":
        return torch.relu(alpha * smooth)
    return torch.relu(mmd + alpha * smooth)


def numeric_columns(vocab: DigitVocab, max_value: int) -> list[int]:
    """The columns of ``vocab.number_ids`` of the tokens of 0..min(max_value, 10^K - 1), by value:
    the digit tokens, then the width-w tokens of the values with w digits."""
    offsets = vocab.group_offsets
    top = min(max_value, 10**vocab.max_width - 1)
    return [offsets[len(str(v)) - 1] + v for v in range(top + 1)]


class SMMDLoss(DigitAuxLoss):
    """CE + lambda x the SMMD term, summed over the positions whose label is in V_num and divided
    by the global digit count (on single-digit vocabularies exactly the released module's mean
    over numeric-label positions; on Llama-3 the zero-padded number tokens, outside V_num, count in
    the normaliser with no term)."""

    name = "smmd"
    needs = LossNeeds(vocab=True)

    def __init__(
        self,
        vocab: DigitVocab,
        weight: float,
        max_value: int = 999,
        kernel: str = "gaussian",
        sigmas: Sequence[float] = (2.0,),
        squash_factor: float = 9.0,
        alpha: Union[str, float] = "auto",
        mode: str = "smmd",
        validate: Union[bool, str] = "async",
    ):
        super().__init__(vocab, weight, validate)
        sigmas = (sigmas,) if isinstance(sigmas, (int, float)) else tuple(sigmas)
        _check_options(max_value, kernel, sigmas, squash_factor, alpha, mode)
        self.max_value, self.mode = int(max_value), mode
        columns = numeric_columns(vocab, self.max_value)
        values = torch.arange(len(columns), dtype=torch.float64)
        built = smmd_kernel(values, kernel, sigmas, float(squash_factor), alpha)
        self.alpha = built.alpha
        self.register_buffer("kernel_matrix", built.matrix, persistent=False)
        self.register_buffer("kernel_degree", built.degree, persistent=False)
        self.register_buffer("numeric_columns", torch.tensor(columns, dtype=torch.long), persistent=False)

    def digit_part(self, batch: Batch) -> torch.Tensor:
        spans = batch.spans
        value, width = batch.target_digit, spans.width
        leading = torch.pow(10, (width - 1).clamp_min(0))
        in_numeric = (width == 1) | (value >= leading)
        in_numeric = in_numeric & (width > 0) & (value <= self.max_value)
        logits = batch.digit_logits
        columns = self.numeric_columns.to(logits.device)
        matrix = self.kernel_matrix.to(device=logits.device, dtype=logits.dtype)
        degree = self.kernel_degree.to(device=logits.device, dtype=logits.dtype)
        target = torch.where(in_numeric, value, torch.zeros_like(value))
        term = smmd_term(logits.index_select(-1, columns), target, matrix, degree, self.alpha, self.mode)
        return torch.where(in_numeric, term, torch.zeros_like(term))


def _check_options(max_value, kernel, sigmas, squash_factor, alpha, mode) -> None:
    if isinstance(max_value, bool) or not isinstance(max_value, int) or max_value < 0:
        raise ValueError(f"smmd: max_value must be an integer >= 0, got {max_value!r}")
    if kernel not in KERNELS:
        raise ValueError(f"smmd: kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if not sigmas or not all(isinstance(s, (int, float)) and s > 0 for s in sigmas):
        raise ValueError(f"smmd: sigmas must be numbers > 0, got {sigmas!r}")
    if not isinstance(squash_factor, (int, float)) or squash_factor <= 0:
        raise ValueError(f"smmd: squash_factor must be a number > 0, got {squash_factor!r}")
    if alpha != "auto" and (isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0):
        raise ValueError(f"smmd: alpha must be 'auto' or a number >= 0, got {alpha!r}")
    if mode not in MODES:
        raise ValueError(f"smmd: mode must be one of {', '.join(MODES)}, got {mode!r}")
