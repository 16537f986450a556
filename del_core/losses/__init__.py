"""Numeric losses: DEL and its baselines (MLE, MixCE, EMO, NTL-WAS/MSE, DIST2Loss, ntloss's
NumberLevelLoss, SMMD, NTIL).

:class:`LossSpec` is the one loss set-up of every way in (the training recipe's ``loss`` section,
``DELTrainer``'s arguments): it checks itself, builds the loss and knows the placeholder lambda of
``weight="auto"``; :func:`measure_auto_weight` measures that lambda for both trainers.
:class:`LossPath` (built by name with :func:`build_loss_path`) is where a loss reads the model's
scores, logits or chunked hidden states, for the trainer and the Trainer adapter alike.
"""

from .auto_weight import (
    AUTO_PLACEHOLDER,
    DEFAULT_AUTO_RATIO,
    AutoWeight,
    AutoWeightError,
    auto_weight,
    measure_auto_weight,
)
from .base import LossNeeds, LossOutput, NumericLoss
from .catalog import (
    DEL_DEFAULT_WEIGHT,
    DIST2_DEFAULT_WEIGHT,
    LOSS_NAMES,
    NTL_DEFAULT_WEIGHT,
    SMMD_DEFAULT_WEIGHT,
    WEIGHTED_LOSSES,
    build_loss,
    loss_class,
    loss_name,
)
from .loss_path import (
    LOSS_PATHS,
    CausalLMRun,
    ChunkedPath,
    CompactedPath,
    LogitsPath,
    LossCalls,
    LossPath,
    build_loss_path,
    loss_on_path,
    loss_path_name,
    scored_positions,
)
from .model_needs import build_loss_for_model, head_weight_copy, loss_needs
from .ntil import NTIL_DEFAULT_WEIGHT
from .number_runs import SequenceShard
from .spec import AUTO, DOTTED_SPELLING, KeySpelling, LossSpec, LossSpecError

__all__ = [
    "AUTO",
    "AUTO_PLACEHOLDER",
    "AutoWeight",
    "AutoWeightError",
    "CausalLMRun",
    "ChunkedPath",
    "CompactedPath",
    "DEFAULT_AUTO_RATIO",
    "DEL_DEFAULT_WEIGHT",
    "DIST2_DEFAULT_WEIGHT",
    "DOTTED_SPELLING",
    "KeySpelling",
    "LOSS_NAMES",
    "LOSS_PATHS",
    "LogitsPath",
    "LossCalls",
    "SequenceShard",
    "LossNeeds",
    "LossOutput",
    "LossPath",
    "LossSpec",
    "LossSpecError",
    "NTIL_DEFAULT_WEIGHT",
    "NTL_DEFAULT_WEIGHT",
    "NumericLoss",
    "SMMD_DEFAULT_WEIGHT",
    "WEIGHTED_LOSSES",
    "auto_weight",
    "build_loss",
    "build_loss_path",
    "build_loss_for_model",
    "head_weight_copy",
    "loss_class",
    "loss_name",
    "loss_needs",
    "loss_on_path",
    "loss_path_name",
    "measure_auto_weight",
    "scored_positions",
]
