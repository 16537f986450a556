"""Held-out metrics: how a model does on the held-out problems of its own data (training's held-out
evaluation, the study, the numeric benchmark, the loss demo).

  teacher_forced.py   the one definition of the teacher-forced metrics: CE, digit accuracy and
                      entropy, number and answer accuracy of the reference answers, token by token
                      (per-batch sums :func:`teacher_forced_sums`, :func:`summarise` after summing
                      over batches and ranks; :func:`score_examples`, :func:`score_forced_answers`)
  greedy_answers.py   greedy answers to held-out problems scored by the one answer reader
                      (:mod:`del_core.evaluation.answers`): :func:`score_heldout`, :func:`answer_accuracy`

The greedy outputs themselves come from :func:`del_core.evaluation.generation.generate_greedy`.
"""

from .greedy_answers import HeldOutSummary, answer_accuracy, reference_answer, score_heldout
from .teacher_forced import (
    TeacherForcedMetrics,
    answer_hits,
    digit_hits,
    score_examples,
    score_forced_answers,
    summarise,
    teacher_forced_sums,
)

__all__ = [
    "HeldOutSummary",
    "TeacherForcedMetrics",
    "answer_accuracy",
    "answer_hits",
    "digit_hits",
    "reference_answer",
    "score_examples",
    "score_forced_answers",
    "score_heldout",
    "summarise",
    "teacher_forced_sums",
]
