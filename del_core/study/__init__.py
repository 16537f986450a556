"""The study's release-0.1 import path: the study is :mod:`del_core.experiments.study`. This name
still works for this release, with a FutureWarning, and goes in the next one."""

import warnings

from del_core.experiments.study import *  # noqa: F403
from del_core.experiments.study import __all__  # noqa: F401

warnings.warn(
    "del_core.study is renamed del_core.experiments.study; the old name goes in the next release",
    FutureWarning,
    stacklevel=2,
)
