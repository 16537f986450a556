"""The memory model (del_core/memory_model.py) against hand-computed values.

The per-token inventories were counted on the CPU with tests/bench/live_bytes.py (HF Qwen2, sdpa's
flash kernel, hidden 128, intermediate 512, 4 heads, 2 key-value heads, head dim 32): the bytes
the forward leaves alive were 7,485,440 (fp32, 1 layer, 512 tokens), 4,143,104 (bf16, 1 layer),
14,051,328 (fp32, 2 layers) and 1,443,840 (fp32, 2 layers, gradient checkpointing); the tests
below re-derive those numbers from the formula by hand.
"""

from __future__ import annotations

import sys

import pytest

from del_core.memory_model import (
    ModelShape,
    TrainShape,
    estimate,
    layer_bytes_per_token,
    loss_peak_bytes,
    saved_activation_bytes,
)
from helpers.shared import REPO

SMALL = ModelShape(hidden=128, intermediate=512, layers=1, heads=4, kv_heads=2, vocab=100, qkv_bias=True)
QWEN25_7B = {  # Qwen/Qwen2.5-7B config.json (the keys the model reads)
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}


def test_layer_inventory_per_token():
    # fp32: 2 norms x (input 4H + normalised 4H + output 4H + 4) + q 4H + k, v 2 x 4 x 64 + attention
    # output 4H + log-sum-exp 4 x 4 heads + MLP 4 x 4 x 512
    assert layer_bytes_per_token(SMALL, 4) == 2 * (12 * 128 + 4) + 4 * 128 + 2 * 4 * 64 + 4 * 128 + 16 + 16 * 512
    assert layer_bytes_per_token(SMALL, 4) == 12824
    # bf16: the norms keep an fp32 copy of their input (4H), the normalised input and output in bf16
    assert layer_bytes_per_token(SMALL, 2) == 2 * (8 * 128 + 4) + 2 * 128 + 2 * 2 * 64 + 2 * 128 + 16 + 8 * 512
    assert layer_bytes_per_token(SMALL, 2) == 6936


@pytest.mark.parametrize(
    "layers, dtype_bytes, checkpointing, measured",
    [(1, 4, False, 7_485_440), (1, 2, False, 4_143_104), (2, 4, False, 14_051_328), (2, 4, True, 1_443_840)],
)
def test_saved_activations_equal_the_counted_bytes(layers, dtype_bytes, checkpointing, measured):
    model = ModelShape(128, 512, layers, 4, 2, 100, qkv_bias=True)
    train = TrainShape(seq_len=512, dtype_bytes=dtype_bytes, gradient_checkpointing=checkpointing)
    assert saved_activation_bytes(model, train) == measured


def test_sequence_parallel_shards_the_tokens():
    # sp = 4 > kv_heads = 2: each rank holds 1 key/value head of the whole sequence (repeated), i.e.
    # 4 x 32 values per local token instead of 64; and the attention output comes back from the
    # all-to-all as one more [t, q_dim] tensor.
    one = TrainShape(seq_len=4096, dtype_bytes=4, gradient_checkpointing=False)
    four = TrainShape(seq_len=4096, sp=4, world=4, dtype_bytes=4, gradient_checkpointing=False)
    assert four.tokens_per_rank == 1024
    extra = 4 * 128 + 2 * 4 * (4 * 32 - 64)
    assert layer_bytes_per_token(SMALL, 4, sp=4) == 12824 + extra
    assert layer_bytes_per_token(SMALL, 4, sp=2) == 12824 + 4 * 128  # kv heads 2 split over 2 ranks
    assert saved_activation_bytes(SMALL, four) * 4 == saved_activation_bytes(SMALL, one) + 4096 * extra


def test_activation_peak_falls_about_as_one_over_sp():
    model = ModelShape(**{"hidden": 256, "intermediate": 1024, "layers": 4, "heads": 4, "kv_heads": 2, "vocab": 100})
    peaks = {
        sp: estimate(
            model, TrainShape(8192, sp=sp, world=sp, dtype_bytes=4, gradient_checkpointing=False)
        ).activation_peak
        for sp in (1, 2, 4)
    }
    assert 0.5 < peaks[2] / peaks[1] < 0.55 and 0.25 < peaks[4] / peaks[1] < 0.3


def test_the_chunked_loss_term_is_the_checked_formula():
    sys.path.insert(0, str(REPO / "tests" / "bench"))
    from chunked_loss import predicted_peak_bytes  # the formula docs/results/performance.md checks

    model = ModelShape(**{**dict(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4), "vocab": 152064})
    for tokens, chunk, dtype_bytes in ((6000, 256, 2), (6000, 1024, 2), (2048, 128, 4)):
        train = TrainShape(seq_len=tokens, dtype_bytes=dtype_bytes, chunk_size=chunk)
        assert loss_peak_bytes(model, train) == predicted_peak_bytes(tokens, 152064, 3584, chunk, dtype_bytes)
    assert loss_peak_bytes(model, TrainShape(seq_len=6000)) == 1_367_245_056  # 1.37 GB, as documented
    # logits: [t, V] logits + one fp32 [t, V] buffer, per-token statistics
    logits = TrainShape(seq_len=1024, dtype_bytes=2, loss_path="logits")
    assert loss_peak_bytes(model, logits) == 1024 * 152064 * 8 + 1024 * 112


def test_model_state_under_zero3_and_the_7b_parameter_count():
    model = ModelShape.from_hf_config(QWEN25_7B)
    assert model.qkv_bias and not model.tied_embeddings and model.kv_dim == 512
    assert model.parameters == 7_615_616_512  # Qwen2.5-7B's published count
    est = estimate(model, TrainShape(seq_len=32768, sp=4, world=16))
    p = model.parameters
    assert (est.weights, est.gradients, est.optimizer_states) == (p * 2 // 16, p * 2 // 16, p * 12 // 16)
    assert est.zero3_buffers == (1_000_000_000 + 500_000_000) * 2
    stage2 = estimate(model, TrainShape(seq_len=32768, sp=4, world=16, zero_stage=2))
    assert stage2.weights == p * 2 and stage2.zero3_buffers == 0
    assert est.total == est.model_state + est.activation_peak
    assert est.activation_peak == est.saved_activations + max(est.loss_peak, est.backward_working_set)
    assert [name for name, _ in est.rows()][-3:] == ["model_state", "activation_peak", "total"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"loss_path": "fused"}, "loss_path must be one of logits, chunked"),
        ({"sp": 3, "world": 4}, "sp 3 must be >= 1 and divide world 4"),
        ({"sp": 4, "world": 4, "seq_len": 1001}, "seq_len 1001 is not a multiple of sp 4"),
        ({"dtype_bytes": 1}, "dtype_bytes must be 2"),
        ({"zero_stage": 1}, "zero_stage must be 2 or 3"),
    ],
)
def test_bad_train_shapes_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainShape(**{"seq_len": 1024, **kwargs})


def test_bad_model_shapes_are_named():
    with pytest.raises(ValueError, match="heads 6 is not a multiple of kv_heads 4"):
        ModelShape(hidden=128, intermediate=512, layers=1, heads=6, kv_heads=4, vocab=100)
    with pytest.raises(ValueError, match="ModelShape.layers must be >= 1"):
        ModelShape(hidden=128, intermediate=512, layers=0, heads=4, kv_heads=4, vocab=100)


def test_the_deprecated_module_path_warns_and_gives_the_same_estimate(monkeypatch):
    """``del_core.training.memory_model`` (deprecated in 0.3, removed in 0.4) is the new module."""
    import importlib

    import del_core.memory_model as memory_model

    monkeypatch.delitem(sys.modules, "del_core.training.memory_model", raising=False)
    message = "del_core.training.memory_model is deprecated and will be removed in 0.4; use del_core.memory_model"
    with pytest.warns(FutureWarning, match=message):
        old = importlib.import_module("del_core.training.memory_model")
    train = TrainShape(seq_len=512, micro_batch=1, sp=1, world=1)
    assert old.estimate(SMALL, train) == memory_model.estimate(SMALL, train)
    assert old.estimate is memory_model.estimate
