"""Differential grading of the benchmark scorer on a generated corpus (docs/grading.md).

    python recipes/grade_corpus.py --out grading.md
    python recipes/grade_corpus.py --problems 20 --benchmarks gsm8k,aqua --graders mammoth,strict

Scores >= 15 output forms of --problems records per benchmark with the project's scorer and the
independent graders, and writes the agreement table and every disagreement by kind.
"""

import argparse
import sys
from pathlib import Path

from del_core.console import filter_known_warnings
from del_core.evaluation.benchmarks.data import BenchmarkError, data_dir_from, parse_benchmark_list
from del_core.evaluation.grader_check.differential import report, run_corpus
from del_core.evaluation.grader_check.independent_graders import GRADERS

filter_known_warnings()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="benchmark directory (default: $DEL_BENCHMARK_DIR, else data/benchmarks)")
    parser.add_argument("--benchmarks", default="all")
    parser.add_argument("--problems", type=int, default=300, help="records per benchmark")
    parser.add_argument("--graders", default=",".join(GRADERS), help=f"any of {', '.join(GRADERS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the report here (default: print it)")
    args = parser.parse_args(argv)
    graders = [g for g in args.graders.split(",") if g]
    unknown = [g for g in graders if g not in GRADERS]
    try:
        if unknown:
            raise BenchmarkError(f"unknown grader(s) {unknown}; choose from {', '.join(GRADERS)}")
        data_dir = data_dir_from(args.data_dir)
        graded = run_corpus(data_dir, parse_benchmark_list(args.benchmarks), args.problems, graders, args.seed)
    except BenchmarkError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = report(graded)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
