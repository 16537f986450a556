"""Numeric losses: DEL and its baselines (MLE, MixCE, EMO, NTL-WAS/MSE, DIST2Loss)."""

from .auto_weight import DEFAULT_AUTO_RATIO, auto_weight
from .base import LossOutput, NumericLoss
from .objectives import (
    DEL_DEFAULT_WEIGHT,
    DIST2_DEFAULT_WEIGHT,
    LOSS_NAMES,
    NTL_DEFAULT_WEIGHT,
    WEIGHTED_LOSSES,
    build_loss,
)

__all__ = [
    "DEFAULT_AUTO_RATIO",
    "DEL_DEFAULT_WEIGHT",
    "DIST2_DEFAULT_WEIGHT",
    "LOSS_NAMES",
    "LossOutput",
    "NTL_DEFAULT_WEIGHT",
    "NumericLoss",
    "WEIGHTED_LOSSES",
    "auto_weight",
    "build_loss",
]
