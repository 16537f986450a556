"""The grader check: how far the benchmark verdicts of :mod:`del_core.evaluation.answers` can be
trusted, by differential grading on a generated corpus (``recipes/grade_corpus.py``, docs/grading.md).

  corpus.py               model-style outputs for real benchmark records, each labelled by how it
                          was written (right, wrong, hedge, no_answer): :func:`build_corpus`
  independent_graders.py  graders written without the project's readers (math_verify, mammoth,
                          strict): :data:`GRADERS`
  differential.py         every item graded by the project and each grader; the agreement table and
                          the disagreements by kind (:func:`run_corpus`, :func:`report`)

Nothing in training or the benchmarks imports this package: it checks the answer readers from
outside.
"""

from .corpus import CorpusItem, build_corpus
from .differential import GradedItem, agreement_table, report, run_corpus
from .independent_graders import GRADERS

__all__ = ["GRADERS", "CorpusItem", "GradedItem", "agreement_table", "build_corpus", "report", "run_corpus"]
