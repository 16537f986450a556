"""The command line of ``recipes/numeric_bench.py``: ``[BENCH.yaml] [key=value ...]``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from del_core.config import HELP_FLAGS, ConfigError, keys_help, split_command_line
from del_core.experiments.numeric_bench.config import NumericBenchConfig, load_numeric_bench_config
from del_core.experiments.numeric_bench.protocol import run_benchmark
from del_core.experiments.numeric_bench.report import write_report


def main(argv: Sequence[str], usage: str = "") -> int:
    """Run (or resume) the benchmark and print its report; exit status 0, or 2 with a one-line
    error on stderr (a bad key, or an output root holding another benchmark)."""
    if argv and argv[0] in HELP_FLAGS:
        print(f"{usage or __doc__}\nKeys (key=value, defaults shown):\n{keys_help(NumericBenchConfig)}")
        return 0
    try:
        recipe, overrides = split_command_line(list(argv))
        outcome = run_benchmark(load_numeric_bench_config(recipe, overrides))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    path = write_report(outcome)
    print(path.read_text())
    print(f"report: {path}")
    return 0
