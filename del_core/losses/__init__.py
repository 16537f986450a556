"""Numeric losses: DEL and its baselines (MLE, MixCE, EMO, NTL-WAS/MSE, DIST2Loss)."""

from .base import LossOutput, NumericLoss
from .objectives import (
    DEL_DEFAULT_WEIGHT,
    DIST2_DEFAULT_WEIGHT,
    LOSS_NAMES,
    NTL_DEFAULT_WEIGHT,
    build_loss,
)

__all__ = [
    "DEL_DEFAULT_WEIGHT",
    "DIST2_DEFAULT_WEIGHT",
    "LOSS_NAMES",
    "LossOutput",
    "NTL_DEFAULT_WEIGHT",
    "NumericLoss",
    "build_loss",
]
