"""del_core.study's parts on hand-made numbers: aggregation, curves, held-out scoring, the study's
rows and splits, the report's verdicts, the configuration and the reading of typed metrics records."""

from __future__ import annotations

import contextlib
import io
import json
import math
from decimal import Decimal

import pytest

from del_core.config import split_command_line
from del_core.evaluation.heldout import score_heldout
from del_core.study import StudyError, aggregate, load_study_config, mean_curve, run_metrics, train_overrides
from del_core.study.data import make_rows, make_splits
from del_core.study.report import compare, markdown, verdicts
from del_core.training.records import EvalRecord, FinalRecord, TrainRecord, record_to_json
from helpers.shared import REPO

CPU_CONFIG = REPO / "recipes" / "configs" / "study-cpu.yaml"
GPU_CONFIG = REPO / "recipes" / "configs" / "study-gpu.yaml"


def test_aggregate_mean_and_sample_std():
    stats = aggregate([0.50, 0.60, 0.70])
    assert stats["mean"] == pytest.approx(0.60) and stats["std"] == pytest.approx(0.10) and stats["n"] == 3
    stats = aggregate([2.0, None, 4.0, float("nan")])  # missing and NaN values are left out
    assert stats == {"mean": 3.0, "std": pytest.approx(math.sqrt(2.0)), "n": 2, "values": [2.0, 4.0]}
    assert aggregate([7.0]) == {"mean": 7.0, "std": None, "n": 1, "values": [7.0]}
    assert aggregate([None]) == {"mean": None, "std": None, "n": 0, "values": []}


def test_mean_curve_over_seeds():
    curves = [[{"step": 1, "ce": 2.0}, {"step": 2, "ce": 1.0}], [{"step": 1, "ce": 4.0}, {"step": 2, "ce": 3.0}]]
    curve = mean_curve(curves)
    assert curve["step"] == [1, 2] and curve["mean"] == [3.0, 2.0]
    assert curve["std"] == [pytest.approx(math.sqrt(2.0))] * 2


def test_score_heldout_on_hand_made_answers():
    rows = [
        {"instruction": "q1", "answer": "28.2"},
        {"instruction": "q2", "answer": "393"},
        {"instruction": "q3", "answer": "10"},
    ]
    outputs = ["12 * 2.35 = 28.2\nThe answer is 28.2.", "131 * 3 = 390\nThe answer is 390.", "I do not know."]
    scored, summary = score_heldout(rows, outputs)
    assert [r["correct"] for r in scored] == [True, False, False]
    assert [r["answer"] for r in scored] == ["28.2", "390", None]
    assert summary.n == 3 and summary.exact_acc == pytest.approx(1 / 3)
    assert summary.answered == pytest.approx(2 / 3)
    assert summary.mae == pytest.approx(3 / 2)  # over the 2 answered rows: |28.2-28.2|, |390-393|
    assert summary.log_mae == pytest.approx(abs(math.log(391) - math.log(394)) / 2)


def test_generated_programs_print_their_answers_and_splits_are_disjoint():
    train, heldout = make_splits(300, 60, seed=5)
    assert make_splits(300, 60, seed=5) == (train, heldout)  # deterministic
    assert not {r["instruction"] for r in train} & {r["instruction"] for r in heldout}
    assert {r["style"] for r in train} == {"steps", "program"}
    assert any("." in r["answer"] for r in train) and any("." not in r["answer"] for r in train)
    for row in train + heldout:
        assert row["output"].endswith(f"The answer is {row['answer']}.")
        if row["style"] == "program":
            assert row["instruction"].endswith("Let's write a program.")
            code = row["output"].split("```python\n")[1].split("\n```")[0]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(code, {})
            assert Decimal(printed.getvalue().strip()) == Decimal(row["answer"]), row
    assert len(make_rows(20, seed=1, program_share=0.0)) == 20


# make_splits(6, 3, seed=11), computed with recipes/study_data.py before the generators were merged.
SPLIT_SEED_11 = [
    {"instruction": "What is 898 times 74?", "input": "", "output": "898 * 74 = 66452\nThe answer is 66452.",
     "answer": "66452", "family": "product", "style": "steps"},
    {"instruction": "4 friends share a bill of $2687.84 equally. How much does each friend pay? Let's write a program.",
     "input": "", "output": "```python\nbill = 2687.84\nfriends = 4\neach = bill / friends\nprint(round(each, 2))\n"
     "```\nThe answer is 671.96.", "answer": "671.96", "family": "share", "style": "program"},
    {"instruction": "A shop sells 997, 473, 679 and 766 items on four days. What is the average number of items "
     "per day?", "input": "", "output": "997 + 473 + 679 + 766 = 2915\n2915 / 4 = 728.75\nThe answer is 728.75.",
     "answer": "728.75", "family": "average", "style": "steps"},
]  # fmt: skip


def test_study_rows_are_the_ones_of_before_the_merge():
    train, heldout = make_splits(6, 3, seed=11)
    assert [train[0], train[2], train[5]] == SPLIT_SEED_11
    assert heldout[0]["output"] == "287 * 87 = 24969\nThe answer is 24969."


def _results(del_values, mle_values):
    return {
        "model": "m", "seeds": [0, 1, 2], "reference": {}, "config": {},
        "losses": {"del": {"exact_acc": aggregate(del_values), "tf_digit_entropy": aggregate([0.5])},
                   "mle": {"exact_acc": aggregate(mle_values), "tf_digit_entropy": aggregate([0.4])}},
    }  # fmt: skip


def test_verdict_is_computed_from_the_numbers():
    clear = _results([0.50, 0.52, 0.54], [0.30, 0.31, 0.32])
    found = compare(clear, "exact_acc", "del", "mle")
    assert found["diff"] == pytest.approx(21.0)
    assert found["se"] == pytest.approx(100 * math.sqrt(0.02**2 / 3 + 0.01**2 / 3))
    assert found["verdict"] == "better"
    assert "+21.0 points" in verdicts(clear)[0] and "DEL is better than MLE here" in verdicts(clear)[0]
    noisy = _results([0.50, 0.20, 0.80], [0.45, 0.15, 0.75])
    assert compare(noisy, "exact_acc", "del", "mle")["verdict"] == "unclear"
    worse = _results([0.30, 0.31, 0.32], [0.50, 0.52, 0.54])
    assert "DEL is worse than MLE here" in verdicts(worse)[0]
    table = markdown(clear)
    assert "| del | 3 | 52.0 ± 2.0 |" in table and "| mle | 3 | 31.0 ± 1.0 |" in table


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(StudyError, match="unknown key 'stepz'"):
        load_study_config(CPU_CONFIG, ["stepz=3"])
    with pytest.raises(StudyError, match="'seed' is set by the study"):
        load_study_config(CPU_CONFIG, ["seed=3"])
    with pytest.raises(StudyError, match="losses: unknown"):
        load_study_config(CPU_CONFIG, ["losses=mle,nope"])
    with pytest.raises(StudyError, match=r"unknown training key 'run.max_stepz' \(did you mean run.max_steps"):
        load_study_config(CPU_CONFIG, ["train.run.max_stepz=3"])
    with pytest.raises(StudyError, match="'run.output_dir' is set by the study"):
        load_study_config(CPU_CONFIG, ["train={run: {output_dir: x}}"])
    with pytest.raises(StudyError, match="run.max_steps: Value 'many'"):
        load_study_config(CPU_CONFIG, ["--max_steps=many"])
    with pytest.raises(StudyError, match="run.global_batch_size 12 is not a multiple of run.micro_batch_size 8"):
        load_study_config(CPU_CONFIG, ["run.global_batch_size=12"])
    with pytest.raises(StudyError, match="heldout_size must be > 0"):
        load_study_config(None, ["heldout_size=0"])
    config = load_study_config(CPU_CONFIG, ["max_steps=3", "losses=mle,del", "seeds=0,1"])
    assert config.losses == ["mle", "del"] and config.seeds == [0, 1] and config.train["run"]["max_steps"] == 3
    args = train_overrides(config, "del", 1, tmp_path / "run")
    assert "run.max_steps=3" in args and "loss=del" in args and "run.seed=1" in args and "data.eval_generate=0" in args


def test_training_keys_in_every_spelling_reach_the_train_section(tmp_path):
    config = load_study_config(
        GPU_CONFIG,
        split_command_line(
            ["--lr", "1e-4", "train.run.log_every=5", "seeds=3", "optimizer=torch", "--cache_dir", str(tmp_path)]
        )[1],
    )
    assert config.seeds == [3]
    assert config.train["optimizer"] == {"lr": 1e-4, "warmup_ratio": 0.03, "name": "torch"}
    assert config.train["run"]["log_every"] == 5 and config.train["model"]["cache_dir"] == str(tmp_path)
    assert config.train["model"]["precision"] == "bf16"  # from the YAML's nested train section
    args = train_overrides(config, "mle", 3, tmp_path / "run")
    assert "optimizer.lr=0.0001" in args and 'run.report_to=["jsonl", "tensorboard"]' in args
    assert f"run.output_dir={tmp_path / 'run'}" in args and "loss.weight=" in args


def _write_metrics(run_dir, records):
    run_dir.mkdir(parents=True)
    lines = [json.dumps({**record_to_json(r), "time": 1.0}) for r in records]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_run_metrics_read_the_typed_records(tmp_path):
    def train(step, ce):
        return TrainRecord(step, ce + 0.1, ce, 0.1, 0.5, 0.2, 10, 4, 1e-3, 1.0, 100.0, 0.1, 1.0)

    def held_out(step, label, ce):
        return EvalRecord(step, label, ce, 0.5 + step / 10, 0.8 - step / 10, 0.25 + step / 10, 20, 8, 2)

    before, after = held_out(0, "before", 3.0), held_out(2, "after", 2.0)
    run_dir = tmp_path / "mle" / "seed0"
    _write_metrics(run_dir, [before, train(1, 2.5), train(2, 2.2), after, FinalRecord(2, 4.5, None, before, after)])
    result = run_metrics(run_dir)
    assert result.before == before
    assert result.metrics["tf_ce"] == 2.0 and result.metrics["tf_number_acc"] == pytest.approx(0.45)
    assert result.metrics["tf_digit_entropy"] == pytest.approx(0.6) and result.metrics["train_time_s"] == 4.5
    assert [p["step"] for p in result.curve] == [1, 2] and result.curve[1]["ce"] == 2.2
    assert result.metrics["exact_acc"] is None  # no held-out answers written
