"""parallel.sp in one process: the config's refusals, the layout, DeepSpeed's gradient divisor and
the attention Ulysses wraps (packed examples kept apart) / the one evaluation uses."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from del_core.config import ConfigError
from del_core.engines.deepspeed import gradient_divisor
from del_core.models.sequence_attention import (
    PACKED_SDPA,
    block_causal_mask,
    evaluation_attention,
    register_packed_sdpa,
)
from del_core.parallel import ParallelDims, ParallelLayoutError, check_sequence_head_counts
from del_core.parallel.rendezvous import free_port
from del_core.training.config import DataConfig, LossConfig, ModelConfig, ParallelConfig, TrainConfig
from helpers.tiny_models import tiny_causal_lm


def test_sp_must_be_a_positive_size():
    with pytest.raises(ConfigError, match="parallel.sp must be >= 1, got 0"):
        ParallelConfig(sp=0)


def test_sp_with_tp_is_refused_by_name():
    with pytest.raises(ConfigError, match="parallel.sp=2 with parallel.tp=2 is not supported"):
        ParallelConfig(sp=2, tp=2)


def test_sp_with_eager_attention_is_refused():
    with pytest.raises(ConfigError, match="parallel.sp=2 needs model.attn_implementation sdpa"):
        TrainConfig(model=ModelConfig(attn_implementation="eager"), parallel=ParallelConfig(sp=2))


@pytest.mark.parametrize("name", ["number_level", "ntil", "smmd"])
def test_sp_accepts_the_losses_scoring_whole_numbers(name):
    assert TrainConfig(loss=LossConfig(name=name), parallel=ParallelConfig(sp=2)).parallel.sp == 2


def test_a_sequence_shorter_than_sp_is_refused():
    with pytest.raises(ConfigError, match="data.max_length=3 is shorter than parallel.sp=4"):
        TrainConfig(data=DataConfig(max_length=3), parallel=ParallelConfig(sp=4))
    assert TrainConfig(data=DataConfig(max_length=5), parallel=ParallelConfig(sp=4)).parallel.sp == 4


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_sp_must_divide_the_world(world_of_one):
    with pytest.raises(ParallelLayoutError, match="parallel.sp=2 does not divide the world of 1 processes"):
        ParallelDims.from_world(1, 2)
    with pytest.raises(ParallelLayoutError, match="parallel.sp=2 with parallel.tp=2"):
        ParallelDims.from_world(2, 2)
    dims = ParallelDims.from_world(1, 1)
    assert (dims.sp, dims.sp_rank, dims.dp, dims.shard_sum_group) == (1, 0, 1, None)


def _dims(world: int, rank: int, sp: int) -> ParallelDims:
    return ParallelDims(world, rank, 1, world // sp, rank // sp, sp=sp, sp_rank=rank % sp, dp_group="dp")


def test_gradient_divisor_follows_deepspeeds_averaging():
    zero3, zero2 = {"zero_optimization": {"stage": 3}}, {"zero_optimization": {"stage": 2}}
    # ZeRO-3's reduce-scatter divides by every rank of the dp x sp group, ZeRO-2 by dp.
    assert gradient_divisor(zero3, dp=4, sp=2) == 8
    assert gradient_divisor(zero2, dp=4, sp=2) == 4
    assert gradient_divisor(zero3, dp=2, sp=1) == 2  # no sequence parallelism (e.g. tp 2 x dp 2): dp
    with pytest.raises(ConfigError, match="zero_optimization.reduce_scatter=true"):
        gradient_divisor({"zero_optimization": {"stage": 3, "reduce_scatter": False}}, dp=2, sp=2)


def test_loss_sums_run_over_every_shard():
    assert _dims(8, 5, 2).shard_sum_group is None  # the world: dp x sp
    assert ParallelDims(4, 0, 2, 2, 0, dp_group="dp").shard_sum_group == "dp"


class _Heads:
    def __init__(self, heads, kv_heads):
        self.num_attention_heads, self.num_key_value_heads = heads, kv_heads


def test_sp_must_fit_the_heads():
    check_sequence_head_counts(_Heads(4, 2), 4)  # kv heads replicated over 4 ranks
    check_sequence_head_counts(_Heads(4, 4), 2)
    with pytest.raises(ParallelLayoutError, match="parallel.sp=4 must divide the model's 6 attention heads"):
        check_sequence_head_counts(_Heads(6, 6), 4)
    with pytest.raises(ParallelLayoutError, match="3 key-value heads or be a multiple"):
        check_sequence_head_counts(_Heads(12, 3), 2)


def test_block_causal_mask_keeps_packed_examples_apart():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]])
    mask = block_causal_mask(positions)
    assert mask.shape == (2, 1, 6, 6)
    assert mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1],
    ]
    assert torch.equal(mask[1, 0], torch.ones(6, 6, dtype=torch.bool).tril())
    assert block_causal_mask(positions[1:]) is None  # one example per row: plain causal attention


@pytest.fixture(scope="module")
def tiny_lm():
    shape = dict(hidden=16, layers=2, heads=4, kv_heads=2)
    return tiny_causal_lm("qwen2", 64, **shape, attn_implementation="sdpa", use_cache=False, seed=0).eval()


def test_packed_sdpa_equals_the_examples_run_apart(tiny_lm):
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3]])
    apart = torch.cat([tiny_lm(input_ids=ids[:, :6]).logits, tiny_lm(input_ids=ids[:, 6:]).logits], 1)
    tiny_lm.set_attn_implementation(register_packed_sdpa())
    try:
        # No mask at all (as under Ulysses, which drops it): the position ids keep the examples apart.
        with torch.no_grad():
            packed = tiny_lm(input_ids=ids, position_ids=positions, attention_mask=None).logits
    finally:
        tiny_lm.set_attn_implementation("sdpa")
    torch.testing.assert_close(packed, apart, rtol=1e-5, atol=1e-6)


def test_evaluation_attention_is_plain_sdpa_and_restores_training_attention(tiny_lm):
    tiny_lm.set_attn_implementation(register_packed_sdpa())
    try:
        with evaluation_attention(tiny_lm):
            assert tiny_lm.config._attn_implementation == "sdpa"
        assert tiny_lm.config._attn_implementation == PACKED_SDPA
        with evaluation_attention(tiny_lm, enabled=False):
            assert tiny_lm.config._attn_implementation == PACKED_SDPA
    finally:
        tiny_lm.set_attn_implementation("sdpa")


def test_the_deepspeed_config_counts_data_parallel_ranks_only():
    """ZeRO-3's partitioning in from_pretrained reads the config before the Ulysses groups exist:
    sequence_parallel_size makes it count world / sp data-parallel ranks in the batch sizes."""
    from del_core.engines import BatchShape
    from del_core.engines.deepspeed.config import build_ds_config
    from del_core.training.config import OptimizerConfig

    shape = BatchShape(global_batch=8, micro_batch=2, data_parallel=2)  # 8 ranks = dp 2 x sp 4
    ds = build_ds_config(ParallelConfig(sp=4), OptimizerConfig(), shape, bf16=False, use_ds_optimizer=False)
    assert ds["sequence_parallel_size"] == 4
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (8, 2)
    plain = build_ds_config(ParallelConfig(), OptimizerConfig(), shape, bf16=False, use_ds_optimizer=False)
    assert "sequence_parallel_size" not in plain
