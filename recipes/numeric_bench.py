"""The from-scratch numeric-learning benchmark: every loss on seeded arithmetic, paired CIs.

    python recipes/numeric_bench.py                                           # default (CPU, ~60 min)
    python recipes/numeric_bench.py recipes/configs/numeric-bench-smoke.yaml  # < 2 minutes
    python recipes/numeric_bench.py recipes/configs/numeric-bench-gpu.yaml seeds=[0,1,2,3,4,5,6,7]

Keys: del_core/arithmetic/config.py. Re-running on the same output_root resumes (finished runs are
kept). Writes OUTPUT_ROOT/report.md, summary.json, report.png and runs/*.json.
"""

import sys

from del_core.arithmetic.config import load_bench_config
from del_core.arithmetic.protocol import run_benchmark
from del_core.arithmetic.report import write_report
from del_core.config import ConfigError, split_command_line
from del_core.console import filter_known_warnings

filter_known_warnings()


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        recipe, overrides = split_command_line(argv)
        config = load_bench_config(recipe, overrides)
        outcome = run_benchmark(config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    path = write_report(outcome)
    print(path.read_text())
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
