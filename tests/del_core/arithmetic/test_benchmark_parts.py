"""The benchmark's parts against independent references: problems and their answers, the
splits, the tokenizer on the real DigitVocab path, scoring, the t intervals and the lambda choice."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import pytest
import torch

from del_core import DigitVocab
from del_core.arithmetic.config import BenchConfig
from del_core.arithmetic.protocol import choose_lambdas, final_specs, selection_specs
from del_core.arithmetic.report import task_by_seed, task_table
from del_core.arithmetic.runs import RunResult, RunSpec, encode_batch, training_examples
from del_core.arithmetic.scoring import EvalResult, score_answers
from del_core.arithmetic.tasks import TASKS, Problem, make_split
from del_core.arithmetic.tokenizer import build_tokenizer
from del_core.data.tokenized import collate
from del_core.evaluation.confidence import paired_difference, seeds_for_half_width, t_interval, verdict

SCALE = {"km": 3, "m": 0, "cm": -2, "mm": -3, "kg": 3, "g": 0}


def reference_answer(prompt: str) -> Decimal:
    """The answer of a prompt, computed from its text alone."""
    convert = re.fullmatch(r"([\d.]+) (\w+) in (\w+)=", prompt)
    if convert:
        value, source, target = convert.groups()
        return Decimal(value) * Decimal(10) ** (SCALE[source] - SCALE[target])
    a, op, b = re.fullmatch(r"([\d.]+)([-+*])([\d.]+)=", prompt).groups()
    return {"+": Decimal(a) + Decimal(b), "-": Decimal(a) - Decimal(b), "*": Decimal(a) * Decimal(b)}[op]


@pytest.mark.parametrize("split", ["train", "val", "test", "ood"])
def test_every_answer_is_the_value_of_its_prompt(split):
    problems = make_split(split, 400, 3, seed=0)
    assert {p.task for p in problems} == set(TASKS)
    for p in problems:
        assert Decimal(p.answer) == reference_answer(p.prompt), p
        assert "e" not in p.answer.lower() and not (("." in p.answer) and p.answer.endswith("0")), p


def test_splits_never_share_a_problem_and_ood_is_wider():
    sets = {
        s: {p.prompt for p in make_split(s, 1500 if s != "train" else 6000, 3, seed=1)}
        for s in ("train", "val", "test")
    }
    assert not sets["train"] & sets["val"] and not sets["train"] & sets["test"] and not sets["val"] & sets["test"]
    ood = make_split("ood", 300, 3, seed=0)
    widths = [max(len(n.split(".")[0]) for n in re.findall(r"[\d.]+", p.prompt)) for p in ood]
    assert min(widths) == 4 and max(widths) == 4
    assert make_split("test", 50, 3, seed=3) == make_split("test", 50, 3, seed=3)
    assert make_split("test", 50, 3, seed=3) != make_split("test", 50, 3, seed=4)


@pytest.mark.slow
def test_too_many_unique_problems_is_a_clear_error():
    with pytest.raises(ValueError, match="only .* unique test problems"):
        make_split("test", 5000, 1, seed=0, tasks=["add"])


def test_tokenizer_splits_every_character_and_passes_the_digit_probe():
    tokenizer = build_tokenizer()
    text = "4.82 km in m=4820"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == list(text)
    vocab = DigitVocab.from_tokenizer(tokenizer)
    assert vocab.digit_ids == tuple(range(3, 13)) and vocab.point_id == 13 and not vocab.multi_digit


def test_encode_batch_masks_the_prompt_and_targets_the_answer_and_eos():
    tokenizer = build_tokenizer()
    input_ids, targets = encode_batch([Problem("add", "1+2=", "3"), Problem("add", "10+20=", "30")], tokenizer)
    assert tokenizer.decode(input_ids[0, :5]) == "1+2=3" and input_ids[0, 5] == tokenizer.eos_token_id
    assert input_ids.shape == (2, 9) and input_ids[0, 6:].tolist() == [tokenizer.pad_token_id] * 3
    # position t predicts t + 1: the '=' position predicts '3', the '3' position predicts EOS
    assert targets[0].tolist() == [-100] * 3 + [input_ids[0, 4].item(), tokenizer.eos_token_id] + [-100] * 4
    assert tokenizer.decode(targets[1, 5:7]) == "30" and targets[1, 7] == tokenizer.eos_token_id


def test_the_encoded_training_split_gives_the_batches_of_encoding_each_problem_alone():
    """training_examples (tokenised once, in batched calls) collates to exactly what tokenising each
    problem on its own gives, for a batch drawn from the whole split."""
    tokenizer = build_tokenizer()
    examples = training_examples(600, 2, TASKS)
    problems = make_split("train", 600, 2, 0, TASKS, unique=False)
    assert len(examples) == len(problems)
    for index in (0, 17, 599):
        alone = tokenizer(problems[index].prompt + problems[index].answer, add_special_tokens=False)["input_ids"]
        assert examples[index].input_ids == [*alone, tokenizer.eos_token_id]
    picked = [3, 599, 41, 0, 250]
    batch = collate([examples[i] for i in picked], tokenizer.pad_token_id)
    input_ids, targets = encode_batch([problems[i] for i in picked], tokenizer)
    assert torch.equal(batch.input_ids, input_ids) and torch.equal(batch.targets, targets)
    assert training_examples(600, 2, TASKS) is examples  # made once per process


def test_scoring_against_hand_computed_values():
    problems = [Problem("add", "a", "519"), Problem("add", "b", "519"), Problem("add", "c", "2.5")]
    scores = score_answers(problems, ["519", "529 and more", ""])
    assert scores["correct"] == [1, 0, 0]
    assert scores["exact_acc"] == pytest.approx(1 / 3)
    assert scores["mae"] == pytest.approx((0 + 10 + 2.5) / 3)  # no number reads as 0
    expected_log = (0 + abs(math.log1p(529) - math.log1p(519)) + math.log1p(2.5)) / 3
    assert scores["log_mae"] == pytest.approx(expected_log)
    assert scores["parse_rate"] == pytest.approx(2 / 3)
    # places: hundreds 2/2 right (519, 529), tens 1/2, units 2/2 of those with the place, but the
    # unparsed third answer is wrong at each of its places (units, tenths)
    assert scores["place_acc"] == {"10^2": 1.0, "10^1": 0.5, "10^0": pytest.approx(2 / 3), "10^-1": 0.0}


def test_t_interval_and_paired_difference_by_hand():
    interval = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # sd = sqrt(2.5), t(0.975, 4) = 2.776
    assert interval.mean == 3.0 and interval.half_width == pytest.approx(2.776 * math.sqrt(2.5) / math.sqrt(5))
    diff = paired_difference({0: 0.5, 1: 0.6, 2: 0.7, 9: 0.0}, {0: 0.4, 1: 0.5, 2: 0.62})
    assert diff.n == 3 and diff.mean == pytest.approx(0.0933333, abs=1e-6)
    sd = math.sqrt(((0.1 - 0.09333) ** 2 * 2 + (0.08 - 0.09333) ** 2) / 2)
    assert diff.half_width == pytest.approx(4.303 * sd / math.sqrt(3), rel=1e-3)
    assert verdict(diff, higher_is_better=True) == "better" and verdict(diff, higher_is_better=False) == "worse"
    assert verdict(t_interval([-1.0, 1.0, 0.5]), True) == "no difference"


def test_seeds_for_half_width_by_hand():
    # 7.36 over 5 seeds: sd = 7.36 * sqrt(5) / 2.776 = 5.928; 17 seeds give 2.120 * 5.928 / sqrt(17)
    # = 3.048 > 3, 18 give 2.110 * 5.928 / sqrt(18) = 2.948 <= 3.
    assert seeds_for_half_width(7.36, 5, 3.0) == 18
    assert seeds_for_half_width(2.5, 5, 3.0) == 5  # 4 seeds: 3.182 * 2.014 / 2 = 3.20 > 3
    assert seeds_for_half_width(1e6, 5, 3.0) is None
    with pytest.raises(ValueError, match="n >= 2"):
        seeds_for_half_width(3.0, 1, 3.0)


def _result(loss, weight, seed, acc, log_mae) -> RunResult:
    evaluation = EvalResult(
        n=10, exact_acc=acc, mae=1.0, log_mae=log_mae, parse_rate=1.0, tf_ce=1.0, tf_digit_entropy=1.0, tf_digit_acc=0.5
    )
    return RunResult(RunSpec(loss, weight, seed, "select"), {"val": evaluation}, [], 1.0)


def test_lambda_choice_takes_the_best_mean_accuracy_then_the_lower_log_mae():
    config = BenchConfig(
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
    from dataclasses import asdict

    from del_core.arithmetic.config import load_bench_config
    from helpers.shared import REPO

    configs = REPO / "recipes" / "configs"
    assert asdict(load_bench_config(configs / "numeric-bench.yaml")) == asdict(BenchConfig())  # the defaults
    assert load_bench_config(configs / "numeric-bench-gpu.yaml").device == "cuda"
    assert load_bench_config(configs / "numeric-bench-smoke.yaml").losses == ["mle", "del"]


def _test_run(loss, seed, correct) -> RunResult:
    evaluation = EvalResult(
        n=len(correct), exact_acc=sum(correct) / len(correct), mae=1.0, log_mae=1.0, parse_rate=1.0, tf_ce=1.0,
        tf_digit_entropy=1.0, tf_digit_acc=0.5, correct=list(correct),
    )  # fmt: skip
    return RunResult(RunSpec(loss, None, seed, "test"), {"test": evaluation}, [], 1.0)


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
    config = BenchConfig(losses=["mle", "del"], seeds=[0, 1], test_size=40, tasks=["add", "mul"])
    tasks = [p.task for p in make_split("test", 40, config.digits, 0, config.tasks)]
    results = [
        _test_run(loss, seed, [1 if t == "add" else seed for t in tasks]) for loss in ("mle", "del") for seed in (0, 1)
    ]
    lines = task_table(config, results)
    assert lines[0] == f"| loss | add ({tasks.count('add')}) | mul ({tasks.count('mul')}) |"
    assert lines[2] == "| mle | 100.0 | 50.0 |"
    assert lines[3] == "| del | 100.0 (+0.0 ± 0.0) | 50.0 (+0.0 ± 0.0) |"
