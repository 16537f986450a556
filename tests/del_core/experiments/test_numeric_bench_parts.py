"""The numeric benchmark's protocol, report and configuration on hand-made results: the lambda
choice, the seed-major grid, per-task accuracy and its table, and the shipped configurations."""

from __future__ import annotations

import importlib
from dataclasses import asdict

import pytest

from del_core.confidence import paired_difference
from del_core.experiments.grid import Unit
from del_core.experiments.numeric_bench.config import NumericBenchConfig, load_numeric_bench_config
from del_core.experiments.numeric_bench.protocol import choose_lambdas, final_specs, selection_specs
from del_core.experiments.numeric_bench.report import task_by_seed, task_table
from del_core.experiments.numeric_bench.score_unit import EvalResult
from del_core.experiments.numeric_bench.tasks import make_split
from del_core.experiments.results import UnitResult
from helpers.shared import REPO


def _result(loss, weight, seed, acc, log_mae) -> UnitResult:
    evaluation = EvalResult(
        n=10, exact_acc=acc, mae=1.0, log_mae=log_mae, parse_rate=1.0, tf_ce=1.0, tf_digit_entropy=1.0, tf_digit_acc=0.5
    )
    return UnitResult(Unit(loss, weight, seed, "select"), {"val": evaluation}, [], 1.0)


def test_lambda_choice_takes_the_best_mean_accuracy_then_the_lower_log_mae():
    config = NumericBenchConfig(
        losses=["mle", "del", "dist2", "emo"], grids={"del": [0.1, 0.5], "dist2": [0.1, 0.2]}, select_seeds=[7, 8]
    )
    assert {(s.loss, s.weight) for s in selection_specs(config)} == {
        ("del", 0.1),
        ("del", 0.5),
        ("dist2", 0.1),
        ("dist2", 0.2),
    }
    results = [
        _result("del", 0.1, 7, 0.5, 1.0),
        _result("del", 0.1, 8, 0.3, 1.0),  # mean 0.4
        _result("del", 0.5, 7, 0.2, 1.0),
        _result("del", 0.5, 8, 0.7, 1.0),  # mean 0.45
        _result("dist2", 0.1, 7, 0.4, 0.9),
        _result("dist2", 0.1, 8, 0.4, 0.9),
        _result("dist2", 0.2, 7, 0.4, 0.5),
        _result("dist2", 0.2, 8, 0.4, 0.7),
    ]  # tie, lower log-MAE
    chosen = choose_lambdas(config, results)
    assert chosen == {"del": 0.5, "dist2": 0.2}
    specs = final_specs(config, chosen)
    assert {(s.loss, s.weight) for s in specs if s.phase == "test"} == {
        ("mle", None),
        ("del", 0.5),
        ("dist2", 0.2),
        ("emo", None),
    }
    assert sorted(s.seed for s in specs if s.phase == "untrained") == config.seeds
    # seed by seed: any prefix of the run order holds whole seeds of every loss (paired)
    per_seed = len(config.losses) + 1
    assert [s.seed for s in specs] == [seed for seed in config.seeds for _ in range(per_seed)]


def test_the_shipped_benchmark_configurations_load():
    configs = REPO / "recipes" / "configs"
    defaults = asdict(NumericBenchConfig())
    assert asdict(load_numeric_bench_config(configs / "numeric-bench.yaml")) == defaults
    assert load_numeric_bench_config(configs / "numeric-bench-gpu.yaml").device == "cuda"
    assert load_numeric_bench_config(configs / "numeric-bench-smoke.yaml").losses == [
        "mle",
        "del",
        "number_level",
        "smmd",
        "ntil",
    ]


def test_the_names_of_release_0_1_are_gone():
    """Removed in release 0.2 (CHANGELOG.md): the old import paths and names fail at import, naming what is
    missing, instead of resolving to the new ones."""
    from del_core.experiments.numeric_bench import config, run_unit

    with pytest.raises(ImportError, match="cannot import name 'BenchConfig'"):
        from del_core.experiments.numeric_bench.config import BenchConfig  # noqa: F401
    with pytest.raises(ImportError, match="cannot import name 'load_bench_config'"):
        from del_core.experiments.numeric_bench.config import load_bench_config  # noqa: F401
    with pytest.raises(ImportError, match="cannot import name 'RunSpec'"):
        from del_core.experiments.numeric_bench.run_unit import RunSpec  # noqa: F401
    assert not any(hasattr(config, n) for n in ("BenchConfig", "load_bench_config"))
    assert not any(hasattr(run_unit, n) for n in ("RunSpec", "RunResult"))
    for module in ("config", "protocol", "report", "runs", "scoring", "tasks", "tokenizer"):
        with pytest.raises(ModuleNotFoundError, match="No module named 'del_core.arithmetic'"):
            importlib.import_module(f"del_core.arithmetic.{module}")


def _test_run(loss, seed, correct) -> UnitResult:
    evaluation = EvalResult(
        n=len(correct), exact_acc=sum(correct) / len(correct), mae=1.0, log_mae=1.0, parse_rate=1.0, tf_ce=1.0,
        tf_digit_entropy=1.0, tf_digit_acc=0.5, correct=list(correct),
    )  # fmt: skip
    return UnitResult(Unit(loss, None, seed, "test"), {"test": evaluation}, [], 1.0)


def test_per_task_accuracy_by_hand():
    """task_by_seed / task_table on 6 test problems (tasks a a b a b b) and 2 seeds: every number
    worked out by hand."""
    tasks = ["add", "add", "mul", "add", "mul", "mul"]
    results = [
        _test_run("mle", 0, [1, 0, 0, 0, 1, 0]),  # add 1/3, mul 1/3
        _test_run("mle", 1, [1, 1, 0, 0, 0, 0]),  # add 2/3, mul 0
        _test_run("del", 0, [1, 1, 1, 1, 1, 0]),  # add 3/3, mul 2/3
        _test_run("del", 1, [1, 1, 0, 1, 0, 1]),  # add 3/3, mul 1/3
    ]
    assert task_by_seed(results, "mle", tasks, "add") == pytest.approx({0: 1 / 3, 1: 2 / 3})
    assert task_by_seed(results, "del", tasks, "mul") == pytest.approx({0: 2 / 3, 1: 1 / 3})
    assert task_by_seed(results, "del", tasks, "sub") == {}  # no problem of that task
    # add: del - mle per seed = 2/3, 1/3 -> mean 1/2; mul: 1/3, 1/3 -> mean 1/3, zero spread
    add = paired_difference(task_by_seed(results, "del", tasks, "add"), task_by_seed(results, "mle", tasks, "add"))
    assert add.mean == pytest.approx(0.5) and add.n == 2
    mul = paired_difference(task_by_seed(results, "del", tasks, "mul"), task_by_seed(results, "mle", tasks, "mul"))
    assert mul.mean == pytest.approx(1 / 3) and mul.half_width == pytest.approx(0.0)


def test_the_task_table_names_each_tasks_share_of_the_test_split():
    config = NumericBenchConfig(losses=["mle", "del"], seeds=[0, 1], test_size=40, tasks=["add", "mul"])
    tasks = [p.family for p in make_split("test", 40, config.digits, 0, config.tasks)]
    results = [
        _test_run(loss, seed, [1 if t == "add" else seed for t in tasks]) for loss in ("mle", "del") for seed in (0, 1)
    ]
    lines = task_table(config, results)
    assert lines[0] == f"| loss | add ({tasks.count('add')}) | mul ({tasks.count('mul')}) |"
    assert lines[2] == "| mle | 100.0 | 50.0 |"
    assert lines[3] == "| del | 100.0 (+0.0 ± 0.0) | 50.0 (+0.0 ± 0.0) |"


def test_a_run_result_is_its_done_marker_and_a_torn_one_runs_again(tmp_path):
    from del_core.experiments.numeric_bench.run_unit import load_result, result_path, save_result

    result = _test_run("del", 3, [1, 0, 1])
    path = save_result(tmp_path, result)
    assert path == result_path(tmp_path, Unit("del", None, 3, "test")) == tmp_path / "runs/test/del-wnone-s3.json"
    assert load_result(tmp_path, result.spec) == result
    path.write_text(path.read_text()[:40])  # torn
    assert load_result(tmp_path, result.spec) is None
    assert load_result(tmp_path, Unit("mle", None, 3, "test")) is None  # never ran
