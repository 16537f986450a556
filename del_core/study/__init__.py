"""Does DEL help? One starting model fine-tuned with each loss under the same budget, data, seeds
and hyper-parameters, every run evaluated the same way, and a results table and plot.

    config  StudyConfig, load_study_config, train_overrides (each run's train.py command line)
    data    the study's rows (steps, programs or equations) and its train / held-out splits
    runs    train.py and evaluate.py in subprocesses, teacher-forced and greedy held-out answers
    metrics run_metrics, aggregate, mean_curve, collect_results
    comparison  every loss vs MLE, paired over seeds and over problems, with 95% intervals
    report  results.json, results.md, results.png
    pipeline  run_study and the command line of ``recipes/study.py``
"""

from .config import StudyConfig, StudyError, StudyPaths, load_study_config, train_overrides
from .metrics import RunResult, aggregate, collect_results, mean_curve, run_metrics
from .pipeline import main, run_study

__all__ = [
    "RunResult",
    "StudyConfig",
    "StudyError",
    "StudyPaths",
    "aggregate",
    "collect_results",
    "load_study_config",
    "main",
    "mean_curve",
    "run_metrics",
    "run_study",
    "train_overrides",
]
