"""The benchmark's parts against independent references: problems and their answers, the
splits, the tokenizer on the real DigitVocab path, scoring and the t intervals. (The protocol,
report and configuration: tests/del_core/experiments/test_numeric_bench_parts.py.)"""

from __future__ import annotations

import math
import re
from decimal import Decimal

import pytest
import torch

from del_core import DigitVocab
from del_core.confidence import paired_difference, seeds_for_half_width, t_interval, verdict
from del_core.data.synthetic import Problem, answer_text
from del_core.data.tokenized import collate
from del_core.experiments.numeric_bench.char_tokenizer import build_tokenizer, encode_batch
from del_core.experiments.numeric_bench.config import NumericBenchConfig
from del_core.experiments.numeric_bench.run_unit import training_examples
from del_core.experiments.numeric_bench.score_unit import score_answers
from del_core.experiments.numeric_bench.tasks import TASKS, make_split

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
    assert {p.family for p in problems} == set(TASKS)
    for p in problems:
        assert p.answer == reference_answer(p.question), p
        text = answer_text(p.answer)
        assert "e" not in text.lower() and not (("." in text) and text.endswith("0")), p


def test_splits_never_share_a_problem_and_ood_is_wider():
    sets = {
        s: {p.question for p in make_split(s, 1500 if s != "train" else 6000, 3, seed=1)}
        for s in ("train", "val", "test")
    }
    assert not sets["train"] & sets["val"] and not sets["train"] & sets["test"] and not sets["val"] & sets["test"]
    ood = make_split("ood", 300, 3, seed=0)
    widths = [max(len(n.split(".")[0]) for n in re.findall(r"[\d.]+", p.question)) for p in ood]
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
    problems = [Problem("1+2=", Decimal(3), family="add"), Problem("10+20=", Decimal(30), family="add")]
    input_ids, targets = encode_batch(problems, tokenizer)
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
        text = problems[index].question + answer_text(problems[index].answer)
        alone = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert examples[index].input_ids == [*alone, tokenizer.eos_token_id]
    picked = [3, 599, 41, 0, 250]
    batch = collate([examples[i] for i in picked], tokenizer.pad_token_id)
    input_ids, targets = encode_batch([problems[i] for i in picked], tokenizer)
    assert torch.equal(batch.input_ids, input_ids) and torch.equal(batch.targets, targets)
    assert training_examples(600, 2, TASKS) is examples  # made once per process


def test_scoring_against_hand_computed_values():
    problems = [Problem("a", Decimal("519")), Problem("b", Decimal("519")), Problem("c", Decimal("2.5"))]
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


def test_benchmark_training_is_the_plain_loop_with_its_own_hyperparameters():
    from del_core.experiments.numeric_bench.run_unit import loop_config

    config = NumericBenchConfig(steps=60, warmup_steps=10, log_every=20)
    loop = loop_config(config)
    assert (loop.steps, loop.lr, loop.betas, loop.weight_decay, loop.max_grad_norm) == (60, 3e-3, (0.9, 0.98), 0.0, 1.0)
    assert (loop.warmup_steps, loop.min_lr_ratio, loop.log_every) == (10, 0.1, 20)


def test_teacher_forced_scores_are_the_shared_definitions_on_the_gold_answers():
    """The benchmark's teacher-forced CE, digit entropy and accuracy equal the MLE loss's own
    per-batch means on one batch holding every problem (up to float32 rounding of those means)."""
    from del_core import build_loss
    from del_core.experiments.numeric_bench.run_unit import build_model
    from del_core.experiments.numeric_bench.score_unit import teacher_forced

    tokenizer = build_tokenizer()
    vocab = DigitVocab.from_tokenizer(tokenizer)
    model = build_model(NumericBenchConfig(hidden=16, layers=1, heads=2), len(tokenizer), seed=0).train()
    problems = make_split("test", 12, 2, 0, TASKS)
    scores = teacher_forced(model, tokenizer, vocab, problems, batch_size=5)
    assert model.training  # the mode is given back
    input_ids, targets = encode_batch(problems, tokenizer)
    with torch.no_grad():
        model.eval()
        out = build_loss("mle", vocab)(model(input_ids=input_ids, attention_mask=input_ids != 0).logits, targets)
    assert scores["tf_ce"] == pytest.approx(out.ce.item(), rel=1e-5)
    assert scores["tf_digit_entropy"] == pytest.approx(out.metrics["digit_entropy"].item(), rel=1e-5)
    assert scores["tf_digit_acc"] == pytest.approx(out.metrics["digit_acc"].item(), rel=1e-5)
