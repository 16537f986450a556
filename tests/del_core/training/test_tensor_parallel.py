"""Tensor parallelism in training (``tp=N``): DeepSpeed AutoTP shards the body, the LM head is
vocab-parallel (local logit shards), the del_core loss all-reduces its partial sums over the
tensor-parallel group, ZeRO shards over data parallel only. CPU, gloo, a tiny random Qwen2 with the
real Qwen2 tokenizer (151,936 vocabulary rows split over the group).

Every run is compared with a single-process run (tp=1, accumulation 4) on the same global batch:
losses to 1e-5 and the exported weights to fp32 round-off.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.shared import real_tokenizer
from helpers.training import LazyRuns, assert_same_run, make_tiny_qwen2, run_train, tiny_run, train_losses

pytestmark = pytest.mark.launches

RTOL = 1e-5


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    # 4 key-value heads, so that tp=4 has one per rank
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"), kv_heads=4)


@pytest.fixture(scope="module")
def base(tiny_model, tmp_path_factory) -> dict:
    return tiny_run(
        tiny_model,
        tmp_path_factory.mktemp("cache"),
        **{"run.export": "true", "parallel.zero_stage": 3},
        # A large epsilon makes Adam's update proportional to the gradient: with the default 1e-8,
        # entries whose gradient is ~0 get a +-lr step whose sign is fp32 round-off (sums taken in
        # a different order under TP), and the update would hide any error in the gradient's scale.
        **{"optimizer.eps": 1e-3},
    )


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory) -> LazyRuns:
    return LazyRuns(base, tmp_path_factory.mktemp)


@pytest.mark.parametrize(
    "name, tp, extra",
    [
        ("tp2_dp2_zero3", 2, {}),
        ("tp4_dp1_zero3", 4, {}),
        ("tp2_dp2_zero2_chunked", 2, {"parallel.zero_stage": 2, "loss.path": "chunked", "loss.chunk_size": 29}),
    ],
)
def test_tensor_parallel_equals_single_process(runs, name, tp, extra):
    reference = runs("tp1", 1)
    out = runs(name, 4, **{"parallel.tp": tp}, **extra)
    log = runs.procs(name).stdout
    assert f"tensor parallel {tp} x data parallel {4 // tp}" in log
    assert f"LM head columns [0, {151936 // tp})" in log  # rank 0 holds the first vocab shard only
    assert_same_run(out, reference, RTOL)


def test_emo_under_tensor_parallelism_equals_single_process(runs):
    """EMO's cost embedding (the LM head copied before training) keeps each rank's vocabulary rows
    (``NumericLoss.for_vocab_slice``): TP 2 trains as one process does (2 processes: the data-parallel
    side is the other tests')."""
    emo = {"loss": "emo", "loss.weight": ""}
    reference = runs("tp1_emo", 1, **emo)
    out = runs("tp2_zero3_emo", 2, **{"parallel.tp": 2}, **emo)
    assert "LM head columns [0, 75968)" in runs.procs("tp2_zero3_emo").stdout
    assert_same_run(out, reference, RTOL)


def test_resume_from_a_tensor_parallel_checkpoint(runs, base, tmp_path):
    """TP 2 x DP 2: 2 steps, checkpoint, abrupt exit in step 3, resume=auto: step 3 repeats the
    uninterrupted TP 2 run exactly."""
    straight = runs("tp2_dp2_zero3", 4, **{"parallel.tp": 2})
    out = tmp_path / "crashed"
    common = {**base, "parallel.tp": 2, "run.output_dir": out, "run.save_every": 2}
    run_train(4, {**common, "run.fail_at_step": 3}, expect_rc=1, timeout=600)
    assert sorted(train_losses(out)) == [1, 2]
    proc = run_train(4, {**common, "run.resume": "auto"}, timeout=600)
    assert "continuing from" in proc.stdout and "(step 2)" in proc.stdout
    resumed, expected = train_losses(out), train_losses(straight)
    assert resumed[3] == expected[3], (resumed[3], expected[3])
    assert_same_run(out, runs("tp1", 1), RTOL)


def test_tp_must_divide_the_world_and_the_heads(base, tmp_path):
    proc = run_train(2, {**base, "parallel.tp": 4, "run.output_dir": tmp_path / "run"}, expect_rc=1)  # torchrun: 1
    assert "parallel.tp=4 does not divide the world of 2 processes" in proc.stderr
    narrow = make_tiny_qwen2(tmp_path / "narrow", real_tokenizer("qwen2"), kv_heads=1)
    proc = run_train(2, {**base, "model": narrow, "parallel.tp": 2, "run.output_dir": tmp_path / "run2"}, expect_rc=1)
    assert "parallel.tp=2 must divide the model's 1 key-value heads" in proc.stderr
