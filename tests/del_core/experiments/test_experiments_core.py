"""The experiments core on hand-made inputs: the seed-major grid, the fingerprinted output root
(refusal naming the keys, resumable keys allowed), the done markers (a finished unit is skipped, a
torn or missing marker runs again), the unit record, the paired comparison against hand-computed
values, the cell formatters and tables, and the spawned step's failure."""

from __future__ import annotations

import json
import math
import os

import pytest

from del_core.config import ConfigError
from del_core.experiments import output_root
from del_core.experiments.comparison import compare, compare_with_baseline, over_problems
from del_core.experiments.grid import Unit, seed_major_grid
from del_core.experiments.report_parts import interval_text, markdown_table, plus_minus
from del_core.experiments.results import UnitResult
from del_core.experiments.spawned import StepFailed, run_spawned


def test_the_grid_is_seed_major_and_names_its_units():
    units = seed_major_grid(["mle", "del"], [3, 4], {"del": 0.128}.get)
    assert units == [Unit("mle", None, 3), Unit("del", 0.128, 3), Unit("mle", None, 4), Unit("del", 0.128, 4)]
    assert [u.name for u in units[:2]] == ["test/mle-wnone-s3", "test/del-w0.128-s3"]
    assert Unit("del", "auto", 0, "select").name == "select/del-wauto-s0"


def test_a_changed_result_key_is_refused_naming_it_and_resumable_keys_may_change(tmp_path):
    root = tmp_path / "root"
    settings = {"steps": 60, "lr": 0.003, "seeds": [0, 1], "workers": 2}
    output_root.claim(root, settings, ("seeds", "workers"))
    record = json.loads((root / "experiment.json").read_text())
    assert record == {"fingerprint": {"steps": 60, "lr": 0.003}, "resumable": {"seeds": [0, 1], "workers": 2}}
    output_root.claim(root, {**settings, "seeds": [0, 1, 2], "workers": 1}, ("seeds", "workers"))  # more seeds
    assert json.loads((root / "experiment.json").read_text())["resumable"]["seeds"] == [0, 1, 2]
    with pytest.raises(output_root.ResumeRefused, match=r"other values of \['lr', 'steps'\] \(lr: 0.003 -> 0.01; "):
        output_root.claim(root, {**settings, "steps": 61, "lr": 0.01}, ("seeds", "workers"), "a benchmark")
    with pytest.raises(ConfigError, match=r"\['depth'\].*depth: None -> 3"):  # a new key counts as changed
        output_root.claim(root, {**settings, "depth": 3}, ("seeds", "workers"))
    assert json.loads((root / "experiment.json").read_text())["fingerprint"] == {"steps": 60, "lr": 0.003}


def test_done_markers_skip_finished_units_and_a_torn_or_missing_one_runs_again(tmp_path):
    units = seed_major_grid(["mle", "del"], [0], lambda loss: None)
    ran = []

    def run_all():
        for unit in units:
            marker = tmp_path / f"{unit.name}.json"
            if output_root.read_marker(marker) is None:
                ran.append(unit.loss)
                output_root.write_marker(marker, {"loss": unit.loss})

    run_all()
    assert ran == ["mle", "del"] and not list(tmp_path.rglob(".*partial"))  # staged files renamed into place
    run_all()
    assert ran == ["mle", "del"]  # both done: nothing runs
    (tmp_path / "test" / "del-wnone-s0.json").write_text('{"loss": "de')  # torn
    (tmp_path / "test" / "mle-wnone-s0.json").unlink()  # missing
    run_all()
    assert ran == ["mle", "del", "mle", "del"]
    assert output_root.read_marker(tmp_path / "test" / "del-wnone-s0.json") == {"loss": "del"}


def test_the_unit_record_reads_back_what_it_wrote(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Scores:
        acc: float
        correct: list

    result = UnitResult(Unit("del", 0.5, 2, "select"), {"val": Scores(0.25, [1, 0])}, [{"step": 1, "ce": 2.0}], 3.5)
    path = output_root.write_marker(tmp_path / "r.json", result.to_json())
    data = output_root.read_marker(path)
    assert data["spec"] == {"loss": "del", "weight": 0.5, "seed": 2, "phase": "select"}
    assert UnitResult.from_json(data, Scores) == result


def test_the_paired_comparison_against_hand_computed_values():
    # seeds 0..2: del 0.50/0.52/0.57, mle 0.30/0.31/0.32 -> differences 0.20/0.21/0.25, mean 0.22
    c = compare("del", "mle", "acc", True, {0: 0.50, 1: 0.52, 2: 0.57}, {0: 0.30, 1: 0.31, 2: 0.32, 3: 0.9})
    sd = math.sqrt(((0.20 - 0.22) ** 2 + (0.21 - 0.22) ** 2 + (0.25 - 0.22) ** 2) / 2)
    assert c.over_seeds.n == 3 and c.over_seeds.mean == pytest.approx(0.22)  # seed 3 has no pair
    assert c.over_seeds.half_width == pytest.approx(4.303 * sd / math.sqrt(3))
    assert c.verdict == "better" and c.over_problems is None
    assert compare("del", "mle", "log_mae", False, {0: 0.5, 1: 0.52}, {0: 0.3, 1: 0.31}).verdict == "worse"
    assert compare("del", "mle", "acc", True, {0: 0.9}, {0: 0.1}).verdict == "no difference"  # one seed
    assert compare("del", "mle", "acc", True, {0: None}, {0: 0.1}) is None
    # per problem: seed 0 [1,0,0,-1], seed 1 [1,1,0,0] -> means [1, .5, 0, -.5]: 0.25, sd sqrt(5/12), t(3) 3.182
    problems = over_problems({0: [1, 1, 0, 0], 1: [1, 1, 1, 0]}, {0: [0, 1, 0, 1], 1: [0, 0, 1, 0]})
    assert problems.mean == pytest.approx(0.25) and problems.n == 4
    assert problems.half_width == pytest.approx(3.182 * math.sqrt(5 / 12) / 2)
    assert over_problems({0: [1, 0]}, {0: [1, 0, 1]}) is None and over_problems({0: None}, {0: [1]}) is None


def test_compare_with_baseline_reads_every_loss_and_metric():
    runs = {"mle": {0: {"a": 0.1, "b": 2.0}, 1: {"a": 0.2, "b": 2.0}}, "del": {0: {"a": 0.3, "b": 1.0}, 1: {"a": 0.5}}}
    found = compare_with_baseline(runs, [("a", True), ("b", False)], lambda r, m: r.get(m))
    assert [(c.loss, c.metric, c.over_seeds.n) for c in found] == [("del", "a", 2), ("del", "b", 1)]
    assert found[0].over_seeds.mean == pytest.approx(0.25) and found[1].verdict == "no difference"
    assert compare_with_baseline({"del": runs["del"]}, [("a", True)], lambda r, m: r.get(m)) == []


def test_cell_formatters_and_tables():
    assert plus_minus(0.5, 0.0234, 100, 1) == "50.0 ± 2.3" and plus_minus(1.23456, None, 1, 3) == "1.235"
    assert plus_minus(-0.012, 0.004, 100, 1, signed=True) == "-1.2 ± 0.4"
    assert interval_text(0.21, 0.03, 100, 1) == "+21.0 [+18.0, +24.0]"
    assert interval_text(-0.5, None, 1, 3) == "-0.500 (one value)"
    assert markdown_table(["loss", "acc"], [["mle", "50.0"], ["del", ""]]) == [
        "| loss | acc |",
        "|---|---|",
        "| mle | 50.0 |",
        "| del |  |",
    ]


def _fail(message: str) -> None:
    print("started", flush=True)
    raise RuntimeError(message)


def _write_env(path: str) -> None:
    with open(path, "w") as f:
        f.write(os.environ["EXPERIMENT_PROBE"])
    print("to the log")


@pytest.mark.launches
def test_a_spawned_step_gets_its_environment_and_a_failure_names_it_with_its_log(tmp_path):
    log = tmp_path / "step.log"
    run_spawned(_write_env, str(tmp_path / "env"), log, {"EXPERIMENT_PROBE": "42"}, "probe")
    assert (tmp_path / "env").read_text() == "42" and log.read_text() == "to the log\n"
    assert "EXPERIMENT_PROBE" not in os.environ  # only the spawned process had it
    with pytest.raises(StepFailed, match=r"(?s)training mle seed 0 failed \(exit 1\); log .*started.*RuntimeError: no"):
        run_spawned(_fail, "no", log, {}, "training mle seed 0")
