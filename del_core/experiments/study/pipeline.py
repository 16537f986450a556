"""The study from start to end, resumable: data, the reference, every (loss, seed) run, the report.

The output root is claimed first (:func:`del_core.experiments.output_root.claim`: a study with
other result-changing settings there is refused). Steps (in this order; each is skipped when its
done markers exist, so an interrupted study continues):
  data       OUTPUT_ROOT/data/{train,heldout}.jsonl (:mod:`del_core.experiments.study.problem_rows`)
  reference  the starting model evaluated like the runs: OUTPUT_ROOT/pretrained/{heldout,benchmarks}/
  runs       the seed-major grid of (loss, seed) units (:mod:`del_core.experiments.grid`): each
             trained into OUTPUT_ROOT/<loss>/seed<k>/ (:mod:`del_core.experiments.study.train_unit`),
             then scored (:mod:`del_core.experiments.study.score_unit`)
  report     OUTPUT_ROOT/results.json, results.md, results.png (:mod:`del_core.experiments.study.report`)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from del_core.config import HELP_FLAGS, ConfigError, config_to_dict, keys_help, split_command_line
from del_core.data.jsonl import JsonlAppender, read_jsonl
from del_core.experiments import output_root
from del_core.experiments.grid import Unit, seed_major_grid
from del_core.experiments.output_root import read_marker
from del_core.experiments.study.config import RESUMABLE_KEYS, StudyConfig, StudyError, StudyPaths, load_study_config
from del_core.experiments.study.metrics import collect_results
from del_core.experiments.study.problem_rows import HeldOutRows, heldout_rows, prepare_data
from del_core.experiments.study.report import write_report
from del_core.experiments.study.score_unit import (
    benchmark_dir,
    drop_weights,
    evaluate_benchmarks,
    evaluate_heldout,
    evaluation_done,
)
from del_core.experiments.study.train_unit import train_run, training_done

Log = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    """One step of the study: the reference evaluation (``unit`` None) or one (loss, seed) unit."""

    name: str
    directory: Path
    unit: Optional[Unit] = None


def plan_steps(config: StudyConfig, paths: StudyPaths) -> list[Step]:
    """The reference first, then the seed-major grid of units (an interrupted study has whole seeds)."""
    units = seed_major_grid(config.losses, config.seeds, config.loss_weights.get)
    runs = [Step(f"{u.loss} seed {u.seed}", paths.run_dir(u.loss, u.seed), u) for u in units]
    return [Step("pretrained", paths.pretrained), *runs]


def check_resume(config: StudyConfig, paths: StudyPaths) -> None:
    """Claim the output root (ROOT/experiment.json): a configuration that would change results
    (anything but RESUMABLE_KEYS) is refused, so one table never mixes two set-ups."""
    output_root.claim(paths.root, config_to_dict(config), RESUMABLE_KEYS, "a study")


def clock(seconds: float) -> str:
    """``seconds`` as "1h02m" (an hour or more) or "3m05s"."""
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def _train_unit(config: StudyConfig, step: Step, log: Log) -> bool:
    """Train a run unless its training finished before; True when it trained."""
    if training_done(step.directory):
        log(f"[study]   training skipped: {step.directory}/metrics.jsonl has its final record")
        return False
    started = time.time()
    train_run(config, step.unit.loss, step.unit.seed, step.directory)
    log(f"[study]   trained in {clock(time.time() - started)}")
    return True


def run_step(config: StudyConfig, step: Step, rows: HeldOutRows, data_dir: Optional[Path], log: Log) -> bool:
    """Train (runs only) and evaluate one step, skipping what is done; True when anything ran."""
    did = step.unit is not None and _train_unit(config, step, log)
    model = str(step.directory) if step.unit is not None else config.model
    with_benchmarks = data_dir is not None
    if evaluation_done(step.directory, with_benchmarks):
        log("[study]   evaluation skipped: summaries exist")
        return did
    if read_marker(step.directory / "heldout" / "summary.json") is None:
        started = time.time()
        evaluate_heldout(config, model, rows.forced, rows.greedy, step.directory / "heldout")
        log(
            f"[study]   held-out: {len(rows.forced)} answers teacher-forced, {len(rows.greedy)} greedy in "
            f"{clock(time.time() - started)}"
        )
    if with_benchmarks and read_marker(step.directory / "benchmarks" / "summary.json") is None:
        started = time.time()
        evaluate_benchmarks(config, model, data_dir, step.directory / "benchmarks")
        log(
            f"[study]   {', '.join(config.benchmarks)} ({config.benchmark_limit} each) in "
            f"{clock(time.time() - started)}"
        )
    if step.unit is not None and not config.keep_weights:
        drop_weights(step.directory)
    return True


def _run_units(config: StudyConfig, paths: StudyPaths, log: Log) -> None:
    """Every step in order, with elapsed time and an ETA from the steps that ran (not skipped)."""
    started = time.time()
    prepare_data(config, paths)
    rows = heldout_rows(config, paths.heldout_data)
    data_dir = benchmark_dir(config)
    steps = plan_steps(config, paths)
    durations: list[float] = []
    timings = JsonlAppender(paths.root / "timings.jsonl")
    try:
        for number, step in enumerate(steps, start=1):
            remaining = len(steps) - number + 1
            eta = f", ETA {clock(sum(durations) / len(durations) * remaining)}" if durations else ""
            log(f"[study] {number}/{len(steps)} {step.name}: elapsed {clock(time.time() - started)}{eta}")
            unit_started = time.time()
            if run_step(config, step, rows, data_dir, log):
                durations.append(time.time() - unit_started)
                timings.append({"unit": step.name, "seconds": round(durations[-1], 1)})
            else:
                log(f"[study]   skipped {step.name}: done before")
    finally:
        timings.close()


def _read_timings(paths: StudyPaths) -> dict[str, float]:
    """Unit name -> seconds of its last timed (not skipped) execution."""
    path = paths.root / "timings.jsonl"
    return {r["unit"]: r["seconds"] for r in read_jsonl(path)} if path.is_file() else {}


def run_study(config: StudyConfig, report_only: bool = False, log: Log = print) -> dict:
    """Run (or continue) the whole study, then write the report; returns the results
    (:func:`del_core.experiments.study.metrics.collect_results` plus ``wall_time_s`` and ``unit_times_s``)."""
    paths = StudyPaths(Path(config.output_root))
    started = time.time()
    if not report_only:
        check_resume(config, paths)
        _run_units(config, paths, log)
    results = collect_results(config, paths.root)
    results["wall_time_s"] = None if report_only else round(time.time() - started, 1)
    results["unit_times_s"] = _read_timings(paths)
    write_report(results, paths.root)
    log(
        f"[study] wrote {paths.root / 'results.md'}, {paths.root / 'results.json'} and "
        f"{paths.root / 'results.png'} after {clock(time.time() - started)}"
    )
    return results


def _report_only(overrides: Sequence[str]) -> tuple[bool, list[str]]:
    """(whether ``report_only`` was given true, the other overrides): an invocation mode, not a
    study key (it changes no result)."""
    flags = [o.partition("=")[2] for o in overrides if o.partition("=")[0].replace("-", "_") == "report_only"]
    rest = [o for o in overrides if o.partition("=")[0].replace("-", "_") != "report_only"]
    return bool(flags) and yaml.safe_load(flags[-1]) is True, rest


def main(argv: Sequence[str], usage: str = "") -> int:
    """The study's command line: ``[STUDY.yaml] [report_only=true] [key=value ...]``; exit status
    0, or 2 with a one-line error on stderr. The caller sets OMP_WAIT_POLICY before torch loads
    (``recipes/study.py``)."""
    if argv and argv[0] in HELP_FLAGS:
        print(f"{usage or __doc__}\nStudy keys (key=value):\n{keys_help(StudyConfig)}")
        print("  report_only=false                tables and plot from the finished runs, running nothing")
        print("Training keys (dotted, for every run): recipes/train.py --help")
        return 0
    try:
        recipe, overrides = split_command_line(argv)
        report_only, overrides = _report_only(overrides)
        run_study(
            load_study_config(recipe, overrides), report_only=report_only, log=lambda text: print(text, flush=True)
        )
    except (StudyError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    return 0
