"""The trainer's held-out evaluation: one evaluation, a run's evaluations and their summary.

evaluator.py   HeldOutEvaluator: the teacher-forced metrics and greedy answers of one evaluation,
               sharded over the data-parallel ranks (the metrics themselves are
               :mod:`del_core.evaluation.heldout`)
history.py     HeldOutHistory: a run's evaluations before, during and after training, logged and kept
summary.py     the finished run's console summary and its answers problem by problem
"""

from .evaluator import HeldOutEvaluator, HeldOutResult
from .history import HeldOutHistory

__all__ = ["HeldOutEvaluator", "HeldOutHistory", "HeldOutResult"]
