"""Differential grading of the benchmark scorer on a generated corpus (docs/grading.md).

    python recipes/grade_corpus.py out=grading.md
    python recipes/grade_corpus.py problems=20 benchmarks=gsm8k,aqua graders=mammoth,strict

Scores >= 15 output forms of ``problems`` records per benchmark with the project's scorer and the
independent graders, and writes the agreement table and every disagreement by kind. Keys:
del_core/evaluation/grader_check/command_line.py (--help lists them).
"""

import sys

from del_core.console import filter_known_warnings
from del_core.evaluation.grader_check.command_line import main

filter_known_warnings()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], usage=__doc__))
