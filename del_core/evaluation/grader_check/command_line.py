"""The command line of ``recipes/grade_corpus.py``: ``[key=value ...]`` (:class:`GradeCorpusConfig`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from del_core.config import HELP_FLAGS, ConfigError, keys_help, load_config, option, split_command_line
from del_core.evaluation.benchmarks.files import BenchmarkError, data_dir_from, parse_benchmark_list
from del_core.evaluation.grader_check.differential import report, run_corpus
from del_core.evaluation.grader_check.independent_graders import GRADERS


@dataclass
class GradeCorpusConfig:
    """The keys of a differential grading run."""

    data_dir: Optional[str] = option(
        None, "benchmark directory (default: $DEL_BENCHMARK_DIR, else data/benchmarks)", "DIR"
    )
    benchmarks: str = option("all", "comma list of benchmarks, or all", "LIST")
    problems: int = option(300, "records per benchmark")
    graders: str = option(",".join(GRADERS), f"any of {', '.join(GRADERS)}")
    seed: int = option(0)
    out: Optional[str] = option(None, "write the report here (default: print it)", "FILE")

    def __post_init__(self) -> None:
        if self.problems < 1:
            raise ConfigError(f"problems must be >= 1, got {self.problems}")
        unknown = [g for g in self.grader_names() if g not in GRADERS]
        if unknown:
            raise ConfigError(f"unknown grader(s) {unknown}; choose from {', '.join(GRADERS)}")

    def grader_names(self) -> list[str]:
        return [g for g in self.graders.split(",") if g]


def main(argv: Sequence[str], usage: str = "") -> int:
    """Grade the corpus and print (or write) the report; exit status 0, or 2 with a one-line error."""
    if argv and argv[0] in HELP_FLAGS:
        print(f"{usage or __doc__}\nKeys (key=value, defaults shown):\n{keys_help(GradeCorpusConfig)}")
        return 0
    try:
        recipe, overrides = split_command_line(argv)
        config = load_config(GradeCorpusConfig, recipe, overrides)
        benchmarks = parse_benchmark_list(config.benchmarks)
        graded = run_corpus(
            data_dir_from(config.data_dir), benchmarks, config.problems, config.grader_names(), config.seed
        )
    except (ConfigError, BenchmarkError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = report(graded)
    if config.out:
        Path(config.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0
