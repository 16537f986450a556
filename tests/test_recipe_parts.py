"""The training entry point's pure parts: config parsing, batch plan, LR schedule, DeepSpeed config
filling, checkpoint bookkeeping, held-out metrics, packing through a real model."""
from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path

import pytest
import torch

from del_core import DigitVocab
from recipes import checkpoints
from recipes.config import ConfigError, TrainConfig, load_config, parse_overrides
from recipes.deepspeed_config import build_ds_config
from recipes.heldout import answer_accuracy, last_number, summarise, teacher_forced_sums
from recipes.schedule import StepPlan, warmup_cosine

CONFIGS = Path(__file__).resolve().parents[1] / "recipes" / "configs"


# --- config ---------------------------------------------------------------------------------
def test_overrides_are_parsed_as_yaml():
    assert parse_overrides(["lr=2e-5", "packing=true", "--loss=mle", "loss_options={eta: 0.3}", "tokenizer="]) == {
        "lr": 2e-5, "packing": True, "loss": "mle", "loss_options": {"eta": 0.3}, "tokenizer": None,
    }


def test_recipe_then_overrides(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("loss: del\nloss_weight: 0.256\nlr: 1.0e-5\nglobal_batch_size: 16\n")
    config = load_config(recipe, ["lr=3e-6", "loss=ntl_was", "report_to=jsonl,wandb"])
    assert (config.loss, config.loss_weight, config.lr, config.global_batch_size) == ("ntl_was", 0.256, 3e-6, 16)
    assert config.report_to == ("jsonl", "wandb")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["lerning_rate=1"], "unknown key 'lerning_rate'"),
        (["lr=fast"], "lr must be a number"),
        (["max_steps=1.5"], "max_steps must be an integer"),
        (["packing=yes please"], "packing must be true or false"),
        (["zero_stage=1"], "zero_stage must be one of 2, 3"),
        (["global_batch_size=10", "micro_batch_size=4"], "not a multiple of micro_batch_size"),
        (["offload=true", "zero_stage=2"], "offload needs zero_stage=3"),
        (["resume=/nonexistent/ckpt"], "resume: /nonexistent/ckpt"),
        (["lr"], "expected key=value"),
    ],
)
def test_bad_values_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_bad_recipe_file_is_named(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("loss: del\nepochs: [1\n")
    with pytest.raises(ConfigError, match=f"{recipe}: not valid YAML"):
        load_config(recipe)
    recipe.write_text("loss: del\nwarmup: 0.1\n")
    with pytest.raises(ConfigError, match=f"{recipe}: unknown key 'warmup'.*warmup_ratio"):
        load_config(recipe)


RELEASED = {  # recipe: (lambda, lr) of the released runs (DEL_SPEC.md)
    "qwen2.5-1.5b": (0.128, 5e-6),
    "qwen2.5-7b": (0.128, 5e-6),
    "deepseek-math-7b-instruct": (0.256, 5e-6),
    "codellama-7b": (0.01, 2e-5),
    "mistral-7b": (0.01, 5e-6),
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_recipes(name):
    config = load_config(CONFIGS / f"{name}.yaml")
    assert (config.loss, config.loss_weight, config.lr) == ("del", *RELEASED[name])
    assert config.data == "TIGER-Lab/MathInstruct" and config.epochs == 2 and config.max_length == 1500
    assert config.global_batch_size == 128 and config.warmup_ratio == 0.03 and config.zero_stage == 3
    baseline = load_config(CONFIGS / f"{name}.yaml", ["loss=mle", "loss_weight="])
    assert (baseline.loss, baseline.loss_weight) == ("mle", None)


def test_every_recipe_loads():
    # study-*.yaml configure recipes/study.py (its own keys), not a training run
    names = sorted(p.stem for p in CONFIGS.glob("*.yaml") if not p.stem.startswith("study-"))
    assert set(RELEASED) | {"tiny"} <= set(names)
    for name in names:
        load_config(CONFIGS / f"{name}.yaml")


# --- batch plan and schedule ----------------------------------------------------------------
@pytest.mark.parametrize("micro, dp", [(1, 1), (2, 1), (2, 2), (1, 4), (4, 2)])
def test_every_split_covers_the_same_global_batch(micro, dp):
    plan = StepPlan(num_items=37, global_batch=8, micro_batch=micro, data_parallel=dp, seed=5)
    reference = StepPlan(37, 8, 8, 1, 5)
    assert plan.steps_per_epoch == 4 and plan.accumulation == 8 // (micro * dp)
    for step in range(9):  # crosses two epoch boundaries
        got = sorted(i for rank in range(dp) for mb in plan.micro_batches(step, rank) for i in mb)
        assert got == sorted(reference.global_batch_items(step))
        assert all(len(mb) == micro for rank in range(dp) for mb in plan.micro_batches(step, rank))


def test_epochs_are_permutations_that_depend_on_seed_only():
    plan = StepPlan(20, 4, 2, 1, seed=1)
    epoch0 = [i for s in range(5) for i in plan.global_batch_items(s)]
    epoch1 = [i for s in range(5, 10) for i in plan.global_batch_items(s)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(20)) and epoch0 != epoch1
    assert epoch0 == [i for s in range(5) for i in StepPlan(20, 4, 2, 1, seed=1).global_batch_items(s)]
    assert epoch0 != [i for s in range(5) for i in StepPlan(20, 4, 2, 1, seed=2).global_batch_items(s)]
    assert plan.total_steps(2, 0) == 10 and plan.total_steps(2, 3) == 3 and plan.total_steps(0.5, 0) == 2


def test_too_little_data_is_an_error():
    with pytest.raises(ValueError, match="fewer than one global batch"):
        StepPlan(5, 8, 1, 1, 0)


def test_warmup_cosine_values():
    f = warmup_cosine(total_steps=100, warmup_ratio=0.03, min_ratio=0.1)
    assert [f(0), f(1), f(2)] == [pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0]
    assert f(3) == 1.0
    assert f(3 + 97 // 2) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 48 / 97)))
    assert f(100) == pytest.approx(0.1)


# --- DeepSpeed config -----------------------------------------------------------------------
def test_ds_config_is_filled_from_the_recipe():
    config = TrainConfig(global_batch_size=128, micro_batch_size=2, zero_stage=2, grad_clip=0.5)
    ds = build_ds_config(config, data_parallel=16, bf16=True, use_ds_optimizer=True)
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["gradient_accumulation_steps"] == 4
    assert ds["train_batch_size"] == 128 and ds["bf16"]["enabled"] is True and ds["gradient_clipping"] == 0.5
    assert ds["zero_optimization"]["stage"] == 2 and ds["optimizer"]["type"] == "AdamW"
    offload = build_ds_config(TrainConfig(offload=True), 1, False, use_ds_optimizer=False)
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "optimizer" not in offload and offload["zero_force_ds_cpu_optimizer"] is False
    with pytest.raises(ConfigError, match="not divisible by micro_batch_size 2 x 3 data-parallel"):
        build_ds_config(TrainConfig(global_batch_size=128, micro_batch_size=2), 3, False, False)


def test_ds_config_with_unfilled_auto_is_an_error(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}))
    with pytest.raises(ConfigError, match="zero_optimization.reduce_bucket_size"):
        build_ds_config(TrainConfig(ds_config=str(path)), 1, False, False)


# --- checkpoints ----------------------------------------------------------------------------
def test_only_complete_checkpoints_count(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6, 8):
        (root / checkpoints.tag_for(step)).mkdir(parents=True)
    for step in (2, 4, 6):
        checkpoints.mark_complete(root / checkpoints.tag_for(step), {"step": step})
    (root / "latest").write_text("step_000008")
    complete, incomplete = checkpoints.list_checkpoints(root)
    assert [s for s, _ in complete] == [2, 4, 6] and [p.name for p in incomplete] == ["step_000008"]
    assert checkpoints.newest_complete(root).name == "step_000006"
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        checkpoints.read_state(root / "step_000008")
    removed = checkpoints.prune(root, keep=2)
    assert sorted(p.name for p in removed) == ["step_000002", "step_000008"]
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000004", "step_000006"]
    assert checkpoints.read_state(root / "step_000006") == {"step": 6}


# --- held-out metrics -----------------------------------------------------------------------
def test_last_number():
    assert last_number("so 12 * 3 = 36\nThe answer is 1,234.50.") == Decimal("1234.50")
    assert last_number("x = .5") == Decimal("0.5") and last_number("no numbers") is None
    rows = [{"output": "The answer is 42."}, {"output": "The answer is 3.5."}]
    assert answer_accuracy(rows, ["It is 42", "3.50"]) == 1.0
    assert answer_accuracy(rows, ["41", "nothing"]) == 0.0


def test_teacher_forced_sums_by_hand():
    vocab = DigitVocab(tuple(range(10)), 10)  # ids 0..9 are digits, 10 is '.'
    # one sequence: "1 2 x 3 . 4" -> numbers "12" and "3.4"; logits favour digit 1 everywhere
    targets = torch.tensor([[1, 2, 11, 3, 10, 4, -100]])
    logits = torch.zeros(1, 7, 12)
    logits[..., 1] = 2.0
    sums = summarise(teacher_forced_sums(logits, targets, vocab))
    log_z = math.log(11 + math.exp(2))
    ce = [log_z - 2.0 if t == 1 else log_z for t in (1, 2, 11, 3, 10, 4)]
    assert sums["ce"] == pytest.approx(sum(ce) / 6)
    assert sums["digits"] == 4 and sums["numbers"] == 2 and sums["tokens"] == 6
    assert sums["digit_acc"] == pytest.approx(1 / 4)  # only the '1' is right
    assert sums["number_acc"] == 0.0  # "12" has a wrong '2'
    q = torch.softmax(torch.tensor([0.0, 2.0] + [0.0] * 8), 0)
    assert sums["digit_entropy"] == pytest.approx(float(-(q * q.log()).sum()))
    targets2 = torch.tensor([[1, 11, 1, 1, -100, -100, -100]])
    assert summarise(teacher_forced_sums(logits, targets2, vocab))["number_acc"] == 1.0


# --- packing through a real architecture ----------------------------------------------------
def test_packed_sequences_attend_within_their_example():
    """Logits of two examples packed into one row (attention_mask None, position ids restarting,
    no KV cache - transformers only detects packing without one)
    equal the logits of each example alone: transformers keeps attention per example."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    a, b = torch.randint(0, 50, (1, 5)), torch.randint(0, 50, (1, 7))
    packed = torch.cat([a, b], 1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        together = model(input_ids=packed, position_ids=positions, attention_mask=None, use_cache=False).logits
        alone = torch.cat([model(input_ids=a).logits, model(input_ids=b).logits], 1)
        leaky = model(input_ids=packed, use_cache=False).logits  # positions not restarting: b attends to a
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(leaky[:, 5:], alone[:, 5:], atol=1e-3)
