"""The benchmark protocol: choose each loss's lambda on validation, then run the test seeds.

1. selection: every loss with a lambda grid runs each lambda with ``select_seeds``, scored on the
   validation split; the chosen lambda has the best mean validation exact accuracy (ties: the lower
   log-MAE). Losses without a lambda (MLE, MixCE, EMO) are not tuned.
2. test: every loss, at its chosen lambda, with every test seed, scored on the test and OOD splits;
   one untrained model per test seed is scored too (the floor).

Runs are resumable: each finished run is a file under OUTPUT_ROOT/runs/ and is not run again; a
second invocation with a changed result-affecting key is refused (it would mix two benchmarks).
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from del_core.arithmetic.config import BenchConfig
from del_core.arithmetic.runs import RunResult, RunSpec, load_result, run_one, save_result
from del_core.config import ConfigError

# Keys that may change between invocations on one output_root (they do not change any result).
RESUMABLE_KEYS = ("output_root", "losses", "seeds", "workers", "threads", "eval_batch_size", "target_half_width")


def selection_specs(config: BenchConfig) -> list[RunSpec]:
    return [
        RunSpec(loss, weight, seed, "select")
        for loss in config.losses
        for weight in config.grid(loss) or ()
        for seed in config.select_seeds
    ]


def choose_lambdas(config: BenchConfig, results: Sequence[RunResult]) -> dict[str, float]:
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


def final_specs(config: BenchConfig, chosen: dict[str, float]) -> list[RunSpec]:
    """Every loss at its chosen lambda and the untrained model, seed by seed: an interrupted
    benchmark has whole seeds done (every loss paired), not whole losses."""
    return [
        spec
        for seed in config.seeds
        for spec in (
            *(RunSpec(loss, chosen.get(loss), seed, "test") for loss in config.losses),
            RunSpec("mle", None, seed, "untrained"),
        )
    ]


def _run_and_save(config: BenchConfig, spec: RunSpec) -> RunResult:
    result = run_one(config, spec)
    save_result(Path(config.output_root), result)
    return result


def run_specs(config: BenchConfig, specs: Sequence[RunSpec], label: str) -> list[RunResult]:
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


def check_resumable(config: BenchConfig) -> None:
    """Record the configuration under OUTPUT_ROOT, or refuse when a result-affecting key differs
    from the recorded one (naming the keys)."""
    root = Path(config.output_root)
    path = root / "config.json"
    current = {k: v for k, v in asdict(config).items() if k not in RESUMABLE_KEYS}
    if path.is_file():
        recorded = json.loads(path.read_text())
        changed = sorted(k for k in current.keys() | recorded.keys() if current.get(k) != recorded.get(k))
        if changed:
            raise ConfigError(
                f"{root} holds a benchmark with other values of {changed}: use another output_root "
                "(or delete that folder) to run this configuration"
            )
        return
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=1))


@dataclass(frozen=True)
class BenchOutcome:
    """A finished benchmark: its configuration, the lambda-selection runs, the chosen lambdas and
    the test-phase runs (untrained ones included)."""

    config: BenchConfig
    selected: list[RunResult]
    chosen: dict[str, float]
    results: list[RunResult]


def run_benchmark(config: BenchConfig) -> BenchOutcome:
    """Selection, then test (each resumable)."""
    check_resumable(config)
    selected = run_specs(config, selection_specs(config), "lambda selection")
    chosen = choose_lambdas(config, selected)
    (Path(config.output_root) / "chosen_lambdas.json").write_text(json.dumps(chosen, indent=1))
    return BenchOutcome(config, selected, chosen, run_specs(config, final_specs(config, chosen), "test runs"))
