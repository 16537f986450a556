"""The from-scratch numeric-learning benchmark: every loss on seeded arithmetic, paired CIs.

    python recipes/numeric_bench.py                                           # default (CPU, ~60 min)
    python recipes/numeric_bench.py recipes/configs/numeric-bench-smoke.yaml  # < 2 minutes
    python recipes/numeric_bench.py recipes/configs/numeric-bench-gpu.yaml seeds=[0,1,2,3,4,5,6,7]

Keys: del_core/experiments/numeric_bench/config.py. Re-running on the same output_root resumes
(finished runs are kept). Writes OUTPUT_ROOT/report.md, summary.json, report.png and runs/*.json.
"""

import sys

from del_core.console import filter_known_warnings
from del_core.experiments.numeric_bench.main import main

filter_known_warnings()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], usage=__doc__))
