"""Does DEL help? One starting model fine-tuned with each loss under the same budget, data, seeds
and hyper-parameters, every run evaluated the same way, and a results table and plot: a user of
:mod:`del_core.experiments`.

    config        StudyConfig, load_study_config, train_config (each run's typed TrainConfig)
    problem_rows  the study's rows (steps, programs or equations) and its train / held-out splits
    train_unit    one (loss, seed) run: del_core.training.run in a spawned process
    score_unit    held-out answers (teacher-forced and greedy) and the benchmarks of a model
    metrics       run_metrics, aggregate, mean_curve, collect_results (with the paired comparisons)
    report        results.json, results.md, results.png
    pipeline      run_study and the command line of ``recipes/study.py``
"""

from .config import StudyConfig, StudyError, StudyPaths, load_study_config, train_config
from .metrics import StudyScores, aggregate, collect_results, mean_curve, run_metrics
from .pipeline import main, run_study

__all__ = [
    "StudyConfig",
    "StudyError",
    "StudyPaths",
    "StudyScores",
    "aggregate",
    "collect_results",
    "load_study_config",
    "main",
    "mean_curve",
    "run_metrics",
    "run_study",
    "train_config",
]
