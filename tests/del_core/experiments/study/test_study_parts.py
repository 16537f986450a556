"""del_core.experiments.study's parts on hand-made numbers: aggregation, curves, held-out scoring, the study's
rows and splits, the report's verdicts, the configuration and the reading of typed metrics records."""

from __future__ import annotations

import contextlib
import io
import json
import math
import warnings
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from del_core.config import config_to_dict, split_command_line
from del_core.data.jsonl import read_jsonl
from del_core.data.prompting import PromptFormat
from del_core.data.rows import check_row
from del_core.data.tokenized import encode
from del_core.evaluation.benchmarks.config import load_eval_config
from del_core.evaluation.heldout.greedy_answers import score_heldout
from del_core.experiments.grid import Unit
from del_core.experiments.results import UnitResult
from del_core.experiments.study import (
    StudyError,
    StudyPaths,
    StudyScores,
    aggregate,
    load_study_config,
    mean_curve,
    run_metrics,
    train_config,
)
from del_core.experiments.study.metrics import comparisons as compare_with_baseline
from del_core.experiments.study.problem_rows import make_rows, make_splits, prepare_data
from del_core.experiments.study.report import markdown, plot_panels, verdicts
from del_core.experiments.study.score_unit import benchmark_config
from del_core.training.config import TrainConfig
from del_core.training.records import FinalRecord, TrainRecord, record_to_json
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


@pytest.mark.parametrize("set_name", ["basic", "study"])
def test_equation_rows_end_with_their_answer(set_name):
    rows = make_rows(400, seed=3, program_share=0.0, set_name=set_name, other_style="equation")
    assert {r["style"] for r in rows} == {"equation"} and "The answer" not in "".join(r["output"] for r in rows)
    for row in rows:  # the last number of the output is the answer, written as the answer is
        assert row["output"].rsplit("= ", 1)[1] == row["answer"], row
    same = make_rows(400, seed=3, program_share=0.0, set_name=set_name, other_style="steps")
    assert [r["instruction"] for r in same] == [r["instruction"] for r in rows]  # the style draws nothing
    with pytest.raises(ValueError, match="other_style must be steps or equation"):
        make_rows(2, seed=3, other_style="answer")


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


def _run(value, hits=None):
    scores = StudyScores({"exact_acc": value, "tf_answer_acc": value}, {"tf_answer_acc": hits} if hits else {})
    return UnitResult(Unit("any", None, 0), {"heldout": scores})


def test_a_system_prompt_makes_conversation_rows_with_the_same_targets_and_fewer_tokens(tmp_path, smollm2):
    """system_prompt="" replaces SmolLM2's default system turn by an empty one: the trained tokens
    (the answer and its end-of-turn marker) are the Alpaca row's, the prompt is shorter, and the
    greedy prompt is the conversation's prefix before the answer."""
    sizes = ["train_size=4", "heldout_size=6", "heldout_generate=1"]
    config = load_study_config(CPU_CONFIG, sizes)
    assert config.system_prompt == ""  # the CPU study's
    plain = load_study_config(CPU_CONFIG, [*sizes, "system_prompt="])  # none: the template's default
    assert plain.system_prompt is None
    paths, plain_paths = StudyPaths(tmp_path / "system"), StudyPaths(tmp_path / "plain")
    prepare_data(config, paths)
    prepare_data(plain, plain_paths)
    rows, plain_rows = read_jsonl(paths.heldout_data), read_jsonl(plain_paths.heldout_data)
    assert [r["instruction"] for r in rows] == [r["instruction"] for r in plain_rows]
    for row, plain_row in zip(rows, plain_rows):
        assert row["answer"] == plain_row["answer"] and "messages" in check_row(row, "row")
        assert row["messages"][0] == {"role": "system", "content": ""}
        assert row["messages"][1:] == [
            {"role": "user", "content": plain_row["instruction"]},
            {"role": "assistant", "content": plain_row["output"]},
        ]
        example, plain_example = encode(row, smollm2, 128, "chat"), encode(plain_row, smollm2, 128, "chat")
        targets = [t for t in example.targets if t != -100]
        assert targets == [t for t in plain_example.targets if t != -100]
        assert len(plain_example.input_ids) - len(example.input_ids) == 16  # the default system text's tokens
        prompt = PromptFormat("chat", smollm2).row_prompt(row)
        assert prompt.startswith("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n")
        assert smollm2(prompt, add_special_tokens=False)["input_ids"] == example.input_ids[: -len(targets) - 1]
    with pytest.raises(StudyError, match="system_prompt needs train.data.prompt_format=chat"):
        load_study_config(CPU_CONFIG, ["train.data.prompt_format=alpaca"])


def test_the_benchmarks_are_asked_in_the_trained_prompts_with_the_system_turn(tmp_path):
    """The study's typed evaluation carries the runs' prompt format and system prompt (an empty
    system turn included, which a command-line value would read as none); the YAML record written
    beside it reads back as the same evaluation."""
    config = load_study_config(CPU_CONFIG, ["benchmarks=gsm8k,svamp", "benchmark_limit=2"])
    out = tmp_path / "unit" / "benchmarks"
    evaluation = benchmark_config(config, "smollm2", tmp_path / "bench", out)
    assert (evaluation.prompt_format, evaluation.system_prompt, evaluation.limit) == ("chat", "", 2)
    assert (evaluation.benchmarks, evaluation.output_dir) == ("gsm8k,svamp", str(out))
    path = tmp_path / "benchmarks.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(evaluation)))
    assert load_eval_config([str(path)]) == evaluation
    plain = load_study_config(CPU_CONFIG, ["system_prompt=", "train.data.prompt_format=alpaca"])
    assert benchmark_config(plain, "smollm2", tmp_path, out).prompt_format == "alpaca"
    assert load_eval_config([str(path), "prompt_format=alpaca", "system_prompt="]).system_prompt is None


def test_comparisons_are_paired_over_seeds_and_problems():
    # seeds 0..2: DEL 0.50/0.52/0.57, MLE 0.30/0.31/0.32 -> per-seed differences 0.20/0.21/0.25
    runs = {
        "del": {s: _run(v) for s, v in enumerate([0.50, 0.52, 0.57])},
        "mle": {s: _run(v) for s, v in enumerate([0.30, 0.31, 0.32])},
    }
    [tf, exact] = compare_with_baseline(runs)
    assert (tf.metric, exact.metric, tf.loss, tf.baseline) == ("tf_answer_acc", "exact_acc", "del", "mle")
    sd = math.sqrt(((0.20 - 0.22) ** 2 + (0.21 - 0.22) ** 2 + (0.25 - 0.22) ** 2) / 2)
    assert tf.over_seeds.mean == pytest.approx(0.22) and tf.over_seeds.n == 3
    assert tf.over_seeds.half_width == pytest.approx(4.303 * sd / math.sqrt(3))
    assert tf.verdict == "better" and tf.over_problems is None  # no per-problem results given
    # An unpaired difference of the same means would be "no difference" here: the seeds' shared
    # noise cancels only when paired.
    noisy = {
        "del": {s: _run(v) for s, v in enumerate([0.50, 0.20, 0.80])},
        "mle": {s: _run(v) for s, v in enumerate([0.45, 0.16, 0.74])},
    }
    assert compare_with_baseline(noisy)[0].verdict == "better"
    worse = {"del": runs["mle"], "mle": runs["del"]}
    assert compare_with_baseline(worse)[0].verdict == "worse"
    one_seed = {"del": {0: _run(0.9)}, "mle": {0: _run(0.1)}}
    assert compare_with_baseline(one_seed)[0].over_seeds.half_width is None
    assert compare_with_baseline(one_seed)[0].verdict == "no difference"


def test_over_problems_averages_the_seeds_per_problem():
    # 4 problems, 2 seeds. Per problem and seed, del - mle: seed 0 [1, 0, 0, -1], seed 1 [1, 1, 0, 0]
    # -> per-problem means [1, 0.5, 0, -0.5], mean 0.25, sd sqrt(0.4166...), t(3) 3.182.
    runs = {
        "del": {0: _run(0.5, [1, 1, 0, 0]), 1: _run(0.75, [1, 1, 1, 0])},
        "mle": {0: _run(0.5, [0, 1, 0, 1]), 1: _run(0.25, [0, 0, 1, 0])},
    }
    comparison = compare_with_baseline(runs)[0]
    sd = math.sqrt(sum((v - 0.25) ** 2 for v in (1, 0.5, 0, -0.5)) / 3)
    assert comparison.over_problems.mean == pytest.approx(0.25) and comparison.over_problems.n == 4
    assert comparison.over_problems.half_width == pytest.approx(3.182 * sd / 2)
    runs["mle"][1] = _run(0.25, [0, 0, 1])  # different problem counts: no per-problem interval
    assert compare_with_baseline(runs)[0].over_problems is None
    runs["del"][1] = _run(0.75, [1, 1, 1])  # seed 1 paired on 3 problems, seed 0 on 4: none either
    assert compare_with_baseline(runs)[0].over_problems is None


def _results(del_values, mle_values):
    runs = {
        "del": {s: _run(v) for s, v in enumerate(del_values)},
        "mle": {s: _run(v) for s, v in enumerate(mle_values)},
    }
    return {
        "model": "m", "seeds": [0, 1, 2], "reference": {}, "config": {},
        "losses": {"del": {"tf_answer_acc": aggregate(del_values), "tf_digit_entropy": aggregate([0.5])},
                   "mle": {"tf_answer_acc": aggregate(mle_values), "tf_digit_entropy": aggregate([0.4])}},
        "comparisons": [c.to_json() for c in compare_with_baseline(runs)],
    }  # fmt: skip


def test_verdict_lines_and_tables_are_computed_from_the_numbers():
    clear = _results([0.50, 0.52, 0.54], [0.30, 0.31, 0.32])
    lines = verdicts(clear)
    half = 100 * 4.303 * 0.01 / math.sqrt(3)  # differences 0.20, 0.21, 0.22: sd 0.01
    assert lines[0] == (
        f"del vs mle (teacher-forced answer accuracy): +21.0 [{21 - half:+.1f}, {21 + half:+.1f}] points, "
        "95% CI over 3 seeds: better than MLE."
    )
    assert "Ranking by mean teacher-forced answer accuracy: del 52.0, mle 31.0." in lines
    assert "worse than MLE" in verdicts(_results([0.30, 0.31, 0.32], [0.50, 0.52, 0.55]))[0]
    table = markdown(clear)
    assert "| del | 3 | 52.0 ± 2.0 |" in table and "| mle | 3 | 31.0 ± 1.0 |" in table
    assert f"| del | +21.0 [{21 - half:+.1f}, {21 + half:+.1f}]: better |" in table
    assert "benchmark columns" not in table  # the study ran no benchmark


def test_report_states_the_units_time_and_the_invocation_wall_time():
    """A resumed study's cost is the sum of its units' last runs; --report-only ran none of them,
    so it states no wall time of its own."""
    results = {**_results([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), "unit_times_s": {"mle seed 0": 61.25, "del seed 0": 60}}
    assert markdown({**results, "wall_time_s": None}).endswith(
        "Time of the 2 units (training + scoring, each unit's last run): 121 s.\n"
    )
    assert markdown({**results, "wall_time_s": 3000.4}).endswith(
        "last run): 121 s.\nWall time of the invocation that wrote this report: 3000 s.\n"
    )


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(StudyError, match="unknown key 'stepz'"):
        load_study_config(CPU_CONFIG, ["stepz=3"])
    with pytest.raises(StudyError, match="'run.seed' is set by the study"):
        load_study_config(CPU_CONFIG, ["run.seed=3"])
    with pytest.raises(StudyError, match="losses: unknown"):
        load_study_config(CPU_CONFIG, ["losses=mle,nope"])
    with pytest.raises(StudyError, match=r"command line: unknown key 'run.max_stepz' \(did you mean run.max_steps"):
        load_study_config(CPU_CONFIG, ["train.run.max_stepz=3"])
    with pytest.raises(StudyError, match="'run.output_dir' is set by the study"):
        load_study_config(CPU_CONFIG, ["train={run: {output_dir: x}}"])
    with pytest.raises(StudyError, match="run.max_steps must be an integer, got 'many'"):
        load_study_config(CPU_CONFIG, ["run.max_steps=many"])
    with pytest.raises(StudyError, match="run.global_batch_size 12 is not a multiple of run.micro_batch_size 8"):
        load_study_config(CPU_CONFIG, ["run.global_batch_size=12"])
    with pytest.raises(StudyError, match="heldout_size must be > 0"):
        load_study_config(None, ["heldout_size=0"])
    with pytest.raises(StudyError, match="problem_set: unknown 'basics'; choose from training, study, basic"):
        load_study_config(CPU_CONFIG, ["problem_set=basics"])
    with pytest.raises(StudyError, match="solution_style must be steps or equation, got 'answer'"):
        load_study_config(CPU_CONFIG, ["solution_style=answer"])
    with pytest.raises(StudyError, match="auto_ratios: 'dell' is not a loss"):
        load_study_config(CPU_CONFIG, ["auto_ratios={dell: 0.1}"])
    config = load_study_config(CPU_CONFIG, ["run.max_steps=3", "losses=mle,del", "seeds=0,1"])
    assert config.losses == ["mle", "del"] and config.seeds == [0, 1] and config.train["run"]["max_steps"] == 3
    train = train_config(config, "del", 1, tmp_path / "run")
    assert (train.run.max_steps, train.loss.name, train.run.seed, train.data.eval_generate) == (3, "del", 1, 0)
    assert train.loss.weight == "auto" and train.data.eval_size == 0  # the study scores the runs itself
    assert train.data.source == str(StudyPaths(Path(config.output_root)).train_data)
    assert (train.run.output_dir, train.run.export) == (str(tmp_path / "run"), True)
    ntl = train_config(load_study_config(CPU_CONFIG), "ntl_mse", 0, tmp_path / "run")
    assert ntl.loss.weight == "auto" and ntl.loss.auto_ratio == 0.18
    assert train_config(config, "mle", 0, tmp_path / "run").loss.auto_ratio == TrainConfig().loss.auto_ratio


def test_training_keys_in_every_spelling_reach_the_train_section(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_study_config(
            GPU_CONFIG,
            ["optimizer.lr=1e-4", "train.run.log_every=5", "seeds=3", "optimizer=torch", f"model.cache_dir={tmp_path}"],
        )
    assert config.seeds == [3]
    assert config.train["optimizer"] == {"lr": 1e-4, "warmup_ratio": 0.03, "name": "torch"}
    assert config.train["run"]["log_every"] == 5 and config.train["model"]["cache_dir"] == str(tmp_path)
    assert config.train["model"]["precision"] == "bf16"  # from the YAML's nested train section
    train = train_config(config, "mle", 3, tmp_path / "run")
    assert (train.optimizer.lr, train.optimizer.name) == (1e-4, "torch")
    assert train.run.report_to == ["jsonl", "tensorboard"]
    assert train.run.output_dir == str(tmp_path / "run") and train.loss.weight is None


def test_the_0_1_short_keys_and_flags_are_deprecated_and_give_the_same_study(tmp_path):
    """``--lr 1e-4`` and the short ``cache_dir`` / ``max_steps`` (in ``train={...}`` too) still
    place their keys, each warning with the dotted spelling."""
    new = ["optimizer.lr=1e-4", "seeds=3", f"model.cache_dir={tmp_path}", "train={run: {max_steps: 2}}"]
    old = ["--lr", "1e-4", "seeds=3", "--cache_dir", str(tmp_path), "train={max_steps: 2}"]
    with pytest.warns(FutureWarning) as caught:
        config = load_study_config(GPU_CONFIG, split_command_line(old)[1])
    assert config == load_study_config(GPU_CONFIG, new)
    assert {str(w.message) for w in caught} == {
        "the option '--lr 1e-4' is deprecated and will be removed in 0.4; use 'lr=1e-4'",
        f"the option '--cache_dir {tmp_path}' is deprecated and will be removed in 0.4; use 'cache_dir={tmp_path}'",
        "the study's short training key 'lr' is deprecated and will be removed in 0.4; use 'optimizer.lr'",
        "the study's short training key 'cache_dir' is deprecated and will be removed in 0.4; use 'model.cache_dir'",
        "the study's short training key 'max_steps' is deprecated and will be removed in 0.4; use 'run.max_steps'",
    }


def test_a_removed_training_key_is_refused_in_the_recipe_and_on_the_command_line(tmp_path):
    """Release 0.1's flat keys are gone from training recipes (release 0.2); the study's short command-line
    forms (max_steps, lr) are not those: a removed spelling that is not a short form, or any flat key
    in the recipe's train section, is one error naming the key now."""
    with pytest.raises(StudyError, match="command line: key 'adam_betas' was removed; use 'optimizer.betas'"):
        load_study_config(CPU_CONFIG, ["adam_betas=[0.9, 0.95]"])
    recipe = tmp_path / "study.yaml"
    recipe.write_text(CPU_CONFIG.read_text().replace("train:", "train:\n  lr: 1.0e-4", 1))
    with pytest.raises(StudyError, match=f"{recipe}: train: key 'lr' was removed; use 'optimizer.lr'"):
        load_study_config(recipe)
    assert load_study_config(CPU_CONFIG, ["train={run: {max_steps: 2}}"]).train["run"]["max_steps"] == 2


def _write_metrics(run_dir, records):
    run_dir.mkdir(parents=True)
    lines = [json.dumps({**record_to_json(r), "time": 1.0}) for r in records]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_run_metrics_read_the_typed_records_and_the_heldout_scores(tmp_path):
    def train(step, ce):
        return TrainRecord(step, ce + 0.1, ce, 0.1, 0.5, 0.2, 10, 4, 1e-3, 1.0, 100.0, 0.1, 1.0)

    run_dir = tmp_path / "mle" / "seed0"
    _write_metrics(run_dir, [train(1, 2.5), train(2, 2.2), FinalRecord(2, 4.5, None, None, None)])
    result = run_metrics(run_dir, Unit("mle", None, 0))
    scores = result.evals["heldout"]
    assert scores.metrics["train_time_s"] == 4.5 and scores.metrics["tf_answer_acc"] is None and result.wall_s == 4.5
    assert [p["step"] for p in result.curve] == [1, 2] and result.curve[1]["ce"] == 2.2
    assert scores.metrics["exact_acc"] is None and scores.hits == {}  # no held-out scores written

    heldout = run_dir / "heldout"
    heldout.mkdir()
    forced = {"answer_acc": 0.5, "n": 2, "ce": 0.7, "digit_acc": 0.9, "digit_entropy": 0.3, "number_acc": 0.6}
    (heldout / "summary.json").write_text(json.dumps({"exact_acc": 1.0, "n": 1, "teacher_forced": forced}))
    (heldout / "teacher_forced.jsonl").write_text('{"index": 0, "correct": true}\n{"index": 1, "correct": false}\n')
    (heldout / "predictions.jsonl").write_text('{"index": 0, "correct": true}\n')
    scores = run_metrics(run_dir, Unit("mle", None, 0)).evals["heldout"]
    assert scores.metrics["tf_answer_acc"] == 0.5 and scores.metrics["tf_ce"] == 0.7
    assert scores.metrics["tf_digit_entropy"] == 0.3 and scores.metrics["tf_number_acc"] == 0.6
    assert scores.hits == {"tf_answer_acc": [True, False], "exact_acc": [True]}


def test_the_plot_leads_with_the_primary_metric_and_shows_benchmarks_only_when_they_ran():
    without = {"losses": {"mle": {"tf_answer_acc": {"mean": 0.5}, "bench_macc": {"mean": None}}}}
    keys = [key for key, _, _ in plot_panels(without)]
    assert keys == ["tf_answer_acc", "exact_acc", "log_mae", "tf_digit_entropy", "tf_number_acc"]
    with_benchmarks = {"losses": {"mle": {"bench_macc": {"mean": 0.25}}, "del": {}}}
    assert [key for key, _, _ in plot_panels(with_benchmarks)][-1] == "bench_macc"


def test_the_import_path_of_release_0_1_is_gone():
    """``del_core.study`` was removed in release 0.2 (CHANGELOG.md): the study is only
    ``del_core.experiments.study``."""
    import importlib

    with pytest.raises(ModuleNotFoundError, match="No module named 'del_core.study'"):
        importlib.import_module("del_core.study")


def test_a_study_root_resumes_with_more_seeds_and_refuses_another_training_setup(tmp_path):
    from del_core.config import ConfigError
    from del_core.experiments.study.pipeline import check_resume

    def claim(*overrides):
        config = load_study_config(CPU_CONFIG, [f"output_root={tmp_path / 'study'}", *overrides])
        check_resume(config, StudyPaths(Path(config.output_root)))

    claim("seeds=0", "run.max_steps=2")
    claim("seeds=0,1", "run.max_steps=2", "threads=1")  # resumable: more seeds, fewer threads
    with pytest.raises(ConfigError, match=r"other values of \['train'\] .*'max_steps': 2.*'max_steps': 3"):
        claim("seeds=0,1", "run.max_steps=3")
