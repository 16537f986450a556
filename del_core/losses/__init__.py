"""Numeric losses: DEL and its baselines (MLE, MixCE, EMO, NTL-WAS/MSE, DIST2Loss)."""

from .auto_weight import DEFAULT_AUTO_RATIO, auto_weight
from .base import LossNeeds, LossOutput, NumericLoss
from .catalog import (
    DEL_DEFAULT_WEIGHT,
    DIST2_DEFAULT_WEIGHT,
    LOSS_NAMES,
    NTL_DEFAULT_WEIGHT,
    WEIGHTED_LOSSES,
    build_loss,
    loss_class,
)
from .loss_path import LOSS_PATHS, LossCalls, loss_on_path, loss_path_name
from .model_needs import build_loss_for_model, loss_needs

__all__ = [
    "DEFAULT_AUTO_RATIO",
    "DEL_DEFAULT_WEIGHT",
    "DIST2_DEFAULT_WEIGHT",
    "LOSS_NAMES",
    "LOSS_PATHS",
    "LossCalls",
    "LossNeeds",
    "LossOutput",
    "NTL_DEFAULT_WEIGHT",
    "NumericLoss",
    "WEIGHTED_LOSSES",
    "auto_weight",
    "build_loss",
    "build_loss_for_model",
    "loss_class",
    "loss_needs",
    "loss_on_path",
    "loss_path_name",
]
