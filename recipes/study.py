"""Does DEL help? Fine-tune one starting model with each loss under the same budget, data, seeds and
hyper-parameters, evaluate every run the same way, and write a results table and a plot.

    python recipes/study.py recipes/configs/study-cpu.yaml                 # ~2 h on 2 CPU cores
    python recipes/study.py recipes/configs/study-gpu.yaml benchmark_dir=DIR
    python recipes/study.py CONFIG losses=mle,del seeds=0 run.max_steps=2 output_root=runs/try
    python recipes/study.py CONFIG report_only=true                       # tables and plot from what exists

Overrides are ``key=value``: a key of del_core/experiments/study/config.py (StudyConfig) sets the
study; a dotted training key (``run.max_steps``, ``optimizer.lr``; del_core/training/config.py) is
passed to every training run. Lists may be written ``a,b,c``. The 0.1 spellings (``--key value``,
the short ``max_steps``, ``lr``) still work, with a deprecation warning naming the new one.

Outputs under OUTPUT_ROOT: data/, pretrained/, <loss>/seed<k>/ (the training run, heldout/ and
benchmarks/), results.{json,md,png}; an interrupted study continues where it stopped
(del_core/experiments/study/pipeline.py). The metrics: del_core/experiments/study/metrics.py.
"""

import os
import sys

# Busy-waiting OpenMP threads are many times slower when another job shares the cores (measured:
# greedy generation 5x slower with 2 spinning threads). The OpenMP runtime reads this when torch
# loads, and del_core imports torch: so it is set before the import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from del_core.console import filter_known_warnings  # noqa: E402
from del_core.experiments.study import main  # noqa: E402

filter_known_warnings()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], usage=__doc__))
