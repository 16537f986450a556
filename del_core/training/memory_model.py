"""Deprecated module path of :mod:`del_core.memory_model` (removed in 0.4)."""

import sys
import warnings

from del_core import memory_model

warnings.warn(
    "del_core.training.memory_model is deprecated and will be removed in 0.4; use del_core.memory_model",
    FutureWarning,
    stacklevel=2,
)
# The old path is the new module itself: its names are the same objects.
sys.modules[__name__] = memory_model
