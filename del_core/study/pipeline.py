"""The study from start to end, resumable: data, the reference, every (loss, seed) run, the report.

Steps (in this order; each is skipped when its outputs exist, so an interrupted study continues):
  data       OUTPUT_ROOT/data/{train,heldout}.jsonl (:mod:`del_core.study.data`)
  reference  the starting model evaluated like the runs: OUTPUT_ROOT/pretrained/{heldout,benchmarks}/
  runs       seed by seed, every loss: train.py into OUTPUT_ROOT/<loss>/seed<k>/, then its held-out
             answers and benchmarks (:mod:`del_core.study.runs`)
  report     OUTPUT_ROOT/results.json, results.md, results.png (:mod:`del_core.study.report`)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from del_core.config import ConfigError, config_to_dict, split_command_line
from del_core.data.jsonl import JsonlAppender, read_jsonl
from del_core.study.config import RESUMABLE_KEYS, StudyConfig, StudyError, StudyPaths, load_study_config
from del_core.study.data import HeldoutRows, heldout_rows, prepare_data
from del_core.study.metrics import collect_results
from del_core.study.report import write_report
from del_core.study.runs import (
    benchmark_dir,
    drop_weights,
    evaluate_benchmarks,
    evaluate_heldout,
    evaluation_done,
    train_run,
    training_done,
)

Log = Callable[[str], None]


@dataclass(frozen=True)
class Unit:
    """One step of the study: the reference evaluation (no loss, no seed) or one (loss, seed) run."""

    name: str
    directory: Path
    loss: Optional[str] = None
    seed: Optional[int] = None


def plan_units(config: StudyConfig, paths: StudyPaths) -> list[Unit]:
    """The reference first, then seed by seed every loss (an interrupted study has whole seeds)."""
    units = [Unit("pretrained", paths.pretrained)]
    for seed in config.seeds:
        units += [Unit(f"{loss} seed {seed}", paths.run_dir(loss, seed), loss, seed) for loss in config.losses]
    return units


def check_resume(config: StudyConfig, paths: StudyPaths) -> None:
    """Write ROOT/study_config.json on first use; later, refuse a config that would change results
    (anything but RESUMABLE_KEYS) so one table never mixes two set-ups."""
    path = paths.root / "study_config.json"
    current = config_to_dict(config)
    if path.is_file():
        saved = json.loads(path.read_text())
        changed = sorted(
            k for k in set(saved) | set(current) if k not in RESUMABLE_KEYS and saved.get(k) != current.get(k)
        )
        if changed:
            detail = "; ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in changed)
            raise StudyError(
                f"{paths.root} was started with another configuration ({detail}); use another "
                f"--output_root or delete {paths.root}"
            )
    paths.root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")


def clock(seconds: float) -> str:
    """``seconds`` as "1h02m" (an hour or more) or "3m05s"."""
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def _train_unit(config: StudyConfig, unit: Unit, log: Log) -> bool:
    """Train a run unless its training finished before; True when it trained."""
    if training_done(unit.directory):
        log(f"[study]   training skipped: {unit.directory}/metrics.jsonl has its final record")
        return False
    started = time.time()
    train_run(config, unit.loss, unit.seed, unit.directory)
    log(f"[study]   trained in {clock(time.time() - started)}")
    return True


def run_unit(config: StudyConfig, unit: Unit, rows: HeldoutRows, data_dir: Optional[Path], log: Log) -> bool:
    """Train (runs only) and evaluate one unit, skipping what is done; True when anything ran."""
    did = unit.loss is not None and _train_unit(config, unit, log)
    model = str(unit.directory) if unit.loss is not None else config.model
    with_benchmarks = data_dir is not None
    if evaluation_done(unit.directory, with_benchmarks):
        log("[study]   evaluation skipped: summaries exist")
        return did
    if not (unit.directory / "heldout" / "summary.json").is_file():
        started = time.time()
        evaluate_heldout(config, model, rows.forced, rows.greedy, unit.directory / "heldout")
        log(
            f"[study]   held-out: {len(rows.forced)} answers teacher-forced, {len(rows.greedy)} greedy in "
            f"{clock(time.time() - started)}"
        )
    if with_benchmarks and not (unit.directory / "benchmarks" / "summary.json").is_file():
        started = time.time()
        evaluate_benchmarks(config, model, data_dir, unit.directory / "benchmarks")
        log(
            f"[study]   {', '.join(config.benchmarks)} ({config.benchmark_limit} each) in "
            f"{clock(time.time() - started)}"
        )
    if unit.loss is not None and not config.keep_weights:
        drop_weights(unit.directory)
    return True


def _run_units(config: StudyConfig, paths: StudyPaths, log: Log) -> None:
    """Every unit in order, with elapsed time and an ETA from the units that ran (not skipped)."""
    started = time.time()
    prepare_data(config, paths)
    rows = heldout_rows(config, paths.heldout_data)
    data_dir = benchmark_dir(config)
    units = plan_units(config, paths)
    durations: list[float] = []
    timings = JsonlAppender(paths.root / "timings.jsonl")
    try:
        for number, unit in enumerate(units, start=1):
            remaining = len(units) - number + 1
            eta = f", ETA {clock(sum(durations) / len(durations) * remaining)}" if durations else ""
            log(f"[study] {number}/{len(units)} {unit.name}: elapsed {clock(time.time() - started)}{eta}")
            unit_started = time.time()
            if run_unit(config, unit, rows, data_dir, log):
                durations.append(time.time() - unit_started)
                timings.append({"unit": unit.name, "seconds": round(durations[-1], 1)})
            else:
                log(f"[study]   skipped {unit.name}: done before")
    finally:
        timings.close()


def _read_timings(paths: StudyPaths) -> dict[str, float]:
    """Unit name -> seconds of its last timed (not skipped) execution."""
    path = paths.root / "timings.jsonl"
    return {r["unit"]: r["seconds"] for r in read_jsonl(path)} if path.is_file() else {}


def run_study(config: StudyConfig, report_only: bool = False, log: Log = print) -> dict:
    """Run (or continue) the whole study, then write the report; returns the results
    (:func:`del_core.study.metrics.collect_results` plus ``wall_time_s`` and ``unit_times_s``)."""
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
    """The study's command line: ``[STUDY.yaml] [--report-only] [--key value | key=value ...]``;
    exit status 0, or 2 with a one-line error on stderr. The caller sets OMP_WAIT_POLICY before
    torch loads (``recipes/study.py``)."""
    if argv and argv[0] in ("-h", "--help"):
        print(usage or __doc__)
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
