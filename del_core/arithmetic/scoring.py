"""Release 0.1's import path of :mod:`del_core.experiments.numeric_bench.score_unit`: it still works for
this release, with a FutureWarning, and goes in the next one."""

import warnings

from del_core.experiments.numeric_bench.score_unit import *  # noqa: F403

warnings.warn(
    "del_core.arithmetic.scoring is renamed del_core.experiments.numeric_bench.score_unit; "
    "the old name goes in the next release",
    FutureWarning,
    stacklevel=2,
)
