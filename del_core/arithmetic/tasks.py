"""Release 0.1's import path of :mod:`del_core.experiments.numeric_bench.tasks`: it still works for
this release, with a FutureWarning, and goes in the next one."""

import warnings

from del_core.experiments.numeric_bench.tasks import *  # noqa: F403

warnings.warn(
    "del_core.arithmetic.tasks is renamed del_core.experiments.numeric_bench.tasks; "
    "the old name goes in the next release",
    FutureWarning,
    stacklevel=2,
)
