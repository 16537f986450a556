"""The trainer's pure parts: batch plan, LR schedule, DeepSpeed config filling, checkpoint
bookkeeping, the step's metric sums, packing through a real model."""

from __future__ import annotations

import json
import math

import pytest
import torch

from del_core import DigitVocab
from del_core.config import ConfigError
from del_core.data.tokenized import TokenBatch, check_target_ids
from del_core.engines import BatchShape
from del_core.engines.deepspeed.config import build_ds_config
from del_core.training.config import load_train_config
from del_core.training.records import EvalRecord, FinalRecord, TrainRecord, read_metrics, record_to_json
from del_core.training.run_folder import checkpoints
from del_core.training.schedule import StepPlan, warmup_cosine
from del_core.training.step_metrics import StepReadout, StepSums, read_step, step_counts, train_record
from helpers.tiny_models import tiny_causal_lm


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
def ds_config_of(config, data_parallel: int, bf16: bool, use_ds_optimizer: bool) -> dict:
    shape = BatchShape(config.run.global_batch_size, config.run.micro_batch_size, data_parallel)
    return build_ds_config(config.parallel, config.optimizer, shape, bf16, use_ds_optimizer)


def test_ds_config_is_filled_from_the_recipe():
    config = load_train_config(
        None,
        ["run.global_batch_size=128", "run.micro_batch_size=2", "parallel.zero_stage=2", "optimizer.grad_clip=0.5"],
    )
    ds = ds_config_of(config, data_parallel=16, bf16=True, use_ds_optimizer=True)
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["gradient_accumulation_steps"] == 4
    assert ds["train_batch_size"] == 128 and ds["bf16"]["enabled"] is True and ds["gradient_clipping"] == 0.5
    assert ds["zero_optimization"]["stage"] == 2 and ds["optimizer"]["type"] == "AdamW"
    offload = ds_config_of(load_train_config(None, ["parallel.offload=true"]), 1, False, use_ds_optimizer=False)
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "optimizer" not in offload and offload["zero_force_ds_cpu_optimizer"] is False
    with pytest.raises(ConfigError, match="not divisible by run.micro_batch_size 2 x 3 data-parallel"):
        ds_config_of(load_train_config(None, ["run.global_batch_size=128", "run.micro_batch_size=2"]), 3, False, False)


def test_ds_config_with_unfilled_auto_is_an_error(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}))
    with pytest.raises(ConfigError, match="zero_optimization.reduce_bucket_size"):
        ds_config_of(load_train_config(None, [f"parallel.ds_config={path}"]), 1, False, False)


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


# --- the step's metrics and the metrics.jsonl schema -----------------------------------------
def test_step_sums_weight_digit_metrics_by_digit_counts():
    sums = StepSums(torch.device("cpu"))
    # two micro-batches: 3 digits at entropy 1.0 / accuracy 1/3, 1 digit at entropy 2.0 / accuracy 1
    for loss, digits, entropy, acc in ((0.5, 3, 1.0, 1 / 3), (0.25, 1, 2.0, 1.0)):
        out = {
            "loss": torch.tensor(loss),
            "ce": torch.tensor(loss / 2),
            "aux": torch.tensor(loss / 2),
            "n_tokens": torch.tensor(9.0),
            "n_digits": torch.tensor(float(digits)),
            "digit_entropy": torch.tensor(entropy),
            "digit_acc": torch.tensor(acc),
        }
        sums.add(out)
    counts = torch.tensor([18.0, 4.0, 16.0], dtype=torch.float64)  # tokens, digits, attended tokens
    readout = read_step(sums, counts, torch.tensor(3.0), peak_mem_gb=1.5, stop_requested=True, dp_group=None)
    assert readout.grad_norm == 3.0 and readout.peak_mem_gb == 1.5 and readout.stop_requested
    record = train_record(7, readout, lr=1e-5, step_time_s=2.0)
    assert (record.loss, record.ce, record.aux) == (0.75, 0.375, 0.375)
    assert record.digit_entropy == pytest.approx((3 * 1.0 + 1 * 2.0) / 4)
    assert record.digit_acc == pytest.approx((3 * (1 / 3) + 1) / 4)
    assert (record.n_tokens, record.n_digits) == (18, 4)
    assert record.tokens_per_s == 8.0 and record.step == 7
    no_digits = StepReadout({**readout.sums, "digits": 0.0}, None, 0.0, False)
    empty = train_record(1, no_digits, 1e-5, 1.0)
    assert empty.digit_entropy is None and empty.digit_acc is None and empty.grad_norm is None


def test_step_counts_are_counted_on_the_host_copies():
    targets = torch.tensor([[-100, 15, 16, 7], [-100, -100, 13, -100]])
    batch = TokenBatch(
        targets.clamp_min(0), targets, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), torch.zeros_like(targets)
    )
    batch = batch.with_spans(DigitVocab(tuple(range(15, 25)), 13))
    counts = step_counts([batch, batch], torch.device("cpu"), dp_group=None)
    assert counts.tolist() == [8.0, 4.0, 14.0]  # 4 targets, digits "0" "1" (the point is no digit), 7 attended


def test_target_ids_outside_the_vocabulary_are_named():
    ok = TokenBatch(*(torch.zeros(1, 3, dtype=torch.long) for _ in range(4)))
    bad = torch.tensor([[-100, 3, 5], [4, -100, -7]])
    check_target_ids([ok], vocab_size=5)
    with pytest.raises(ValueError, match=r"micro-batch 1, row 0, position 2: target id 5 .*\[0, 5\)"):
        check_target_ids([ok, TokenBatch(bad, bad, bad, bad)], vocab_size=5)
    with pytest.raises(ValueError, match="micro-batch 0, row 1, position 2: target id -7"):
        check_target_ids([TokenBatch(bad, bad, bad, bad)], vocab_size=6)


def test_metrics_records_round_trip_through_jsonl(tmp_path):
    train = TrainRecord(
        step=1,
        loss=1.0,
        ce=0.5,
        aux=0.5,
        digit_entropy=None,
        digit_acc=0.5,
        n_tokens=10,
        n_digits=2,
        lr=1e-5,
        grad_norm=3.0,
        tokens_per_s=100.0,
        step_time_s=0.1,
        peak_mem_gb=1.0,
    )
    before = EvalRecord(
        step=0,
        label="before",
        ce=1.0,
        digit_acc=0.5,
        digit_entropy=0.7,
        number_acc=0.25,
        tokens=10,
        digits=4,
        numbers=2,
    )
    final = FinalRecord(step=1, train_time_s=2.0, last=train, before=before, after=None)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({**record_to_json(r), "time": 0.0}) + "\n" for r in (train, before, final)))
    assert read_metrics(tmp_path) == [train, before, final]
    assert read_metrics(path, "final") == [final] and read_metrics(tmp_path / "absent") == []


# --- packing through a real architecture ----------------------------------------------------
def test_packed_sequences_attend_within_their_example():
    """Logits of two examples packed into one row (attention_mask None, position ids restarting,
    no KV cache - transformers only detects packing without one)
    equal the logits of each example alone: transformers keeps attention per example."""
    model = tiny_causal_lm("qwen2", 50, hidden=32, layers=2, heads=4, kv_heads=2, seed=0).eval()
    a, b = torch.randint(0, 50, (1, 5)), torch.randint(0, 50, (1, 7))
    packed = torch.cat([a, b], 1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        together = model(input_ids=packed, position_ids=positions, attention_mask=None, use_cache=False).logits
        alone = torch.cat([model(input_ids=a).logits, model(input_ids=b).logits], 1)
        leaky = model(input_ids=packed, use_cache=False).logits  # positions not restarting: b attends to a
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(leaky[:, 5:], alone[:, 5:], atol=1e-3)
