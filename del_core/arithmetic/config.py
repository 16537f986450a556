"""Release 0.1's import path of :mod:`del_core.experiments.numeric_bench.config`: it still works for
this release, with a FutureWarning, and goes in the next one."""

import warnings

from del_core.experiments.numeric_bench.config import *  # noqa: F403
from del_core.experiments.numeric_bench.config import NumericBenchConfig as BenchConfig  # noqa: F401
from del_core.experiments.numeric_bench.config import load_numeric_bench_config as load_bench_config  # noqa: F401

warnings.warn(
    "del_core.arithmetic.config is renamed del_core.experiments.numeric_bench.config; "
    "the old name goes in the next release",
    FutureWarning,
    stacklevel=2,
)
