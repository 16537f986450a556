"""The benchmark protocol: choose each loss's lambda on validation, then run the test seeds (the
grid of :mod:`del_core.experiments.grid`, run into a resumable output root).

1. selection: every loss with a lambda grid runs each lambda with ``select_seeds``, scored on the
   validation split; the chosen lambda has the best mean validation exact accuracy (ties: the lower
   log-MAE). Losses without a lambda (MLE, MixCE, EMO) are not tuned.
2. test: every loss, at its chosen lambda, with every test seed, scored on the test and OOD splits;
   one untrained model per test seed is scored too (the floor).

Runs are resumable: each finished run's result is its done marker, OUTPUT_ROOT/runs/<unit>.json,
and is not run again; a second invocation with a changed result-affecting key is refused
(:func:`del_core.experiments.output_root.claim`: it would mix two benchmarks).
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from del_core.experiments import output_root
from del_core.experiments.grid import Unit, seed_major_grid
from del_core.experiments.numeric_bench.config import RESUMABLE_KEYS, NumericBenchConfig
from del_core.experiments.numeric_bench.run_unit import load_result, run_one, save_result
from del_core.experiments.results import UnitResult


def selection_specs(config: NumericBenchConfig) -> list[Unit]:
    return [
        Unit(loss, weight, seed, "select")
        for loss in config.losses
        for weight in config.grid(loss) or ()
        for seed in config.select_seeds
    ]


def choose_lambdas(config: NumericBenchConfig, results: Sequence[UnitResult]) -> dict[str, float]:
    """loss -> the lambda with the best mean validation exact accuracy (ties: lower log-MAE)."""
    chosen = {}
    for loss in config.losses:
        scores = []
        for weight in config.grid(loss) or ():
            runs = [r for r in results if r.spec.loss == loss and r.spec.weight == weight]
            acc = sum(r.evals["val"].exact_acc for r in runs) / len(runs)
            log_mae = sum(r.evals["val"].log_mae for r in runs) / len(runs)
            scores.append((acc, -log_mae, weight))
        if scores:
            chosen[loss] = max(scores)[2]
    return chosen


def final_specs(config: NumericBenchConfig, chosen: dict[str, float]) -> list[Unit]:
    """Every loss at its chosen lambda and the untrained model, seed by seed: an interrupted
    benchmark has whole seeds done (every loss paired), not whole losses."""
    return [
        unit
        for seed in config.seeds
        for unit in (*seed_major_grid(config.losses, [seed], chosen.get), Unit("mle", None, seed, "untrained"))
    ]


def _run_and_save(config: NumericBenchConfig, spec: Unit) -> UnitResult:
    result = run_one(config, spec)
    save_result(Path(config.output_root), result)
    return result


def run_specs(config: NumericBenchConfig, specs: Sequence[Unit], label: str) -> list[UnitResult]:
    """The results of ``specs``: finished ones read back, the others run ``config.workers`` at a
    time in separate processes, each saved as soon as it finishes; progress on stderr."""
    from tqdm import tqdm

    root = Path(config.output_root)
    done = {spec: load_result(root, spec) for spec in specs}
    todo = [spec for spec, result in done.items() if result is None]
    bar = tqdm(total=len(specs), initial=len(specs) - len(todo), desc=label, unit="run", file=sys.stderr)
    with bar, concurrent.futures.ProcessPoolExecutor(max_workers=config.workers) as pool:
        futures = {pool.submit(_run_and_save, config, spec): spec for spec in todo}
        for future in concurrent.futures.as_completed(futures):
            done[futures[future]] = future.result()
            bar.set_postfix_str(futures[future].name)
            bar.update(1)
    return [done[spec] for spec in specs]


def check_resumable(config: NumericBenchConfig) -> None:
    """Claim OUTPUT_ROOT for this configuration, or refuse when a result-affecting key differs
    from the recorded one (naming the keys)."""
    output_root.claim(Path(config.output_root), asdict(config), RESUMABLE_KEYS, "a benchmark")


@dataclass(frozen=True)
class BenchOutcome:
    """A finished benchmark: its configuration, the lambda-selection runs, the chosen lambdas and
    the test-phase runs (untrained ones included)."""

    config: NumericBenchConfig
    selected: list[UnitResult]
    chosen: dict[str, float]
    results: list[UnitResult]


def run_benchmark(config: NumericBenchConfig) -> BenchOutcome:
    """Selection, then test (each resumable)."""
    check_resumable(config)
    selected = run_specs(config, selection_specs(config), "lambda selection")
    chosen = choose_lambdas(config, selected)
    (Path(config.output_root) / "chosen_lambdas.json").write_text(json.dumps(chosen, indent=1))
    return BenchOutcome(config, selected, chosen, run_specs(config, final_specs(config, chosen), "test runs"))
