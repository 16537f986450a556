"""The chunked loss path with tensor parallelism under ZeRO-3 (``loss.path=chunked parallel.tp=2
parallel.zero_stage=3``): AutoTP makes the LM head vocab-parallel, ZeRO-3 partitions each rank's
head rows over data parallel, and the objective reads that weight outside the head's forward, so
ZeRO-3 gathers it (the engine registers it as the objective's external parameter) around the loss's
forward and backward. CPU, gloo, the tiny random Qwen2 with the real Qwen2 tokenizer (151,936 rows:
75,968 x 32 per tensor-parallel rank, well above ZeRO-3's persistence threshold, so partitioned).

TP 2 x DP 2 is compared with one process (tp=1, accumulation 4, ZeRO-3, the same chunked path) on
the same global batches: the losses of 3 steps to 1e-5 and the exported weights to fp32 round-off.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from helpers.shared import real_tokenizer
from helpers.training import make_tiny_qwen2, run_train, tiny_run, train_losses

pytestmark = [pytest.mark.launches, pytest.mark.slow]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    model = make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))
    chunked = {"loss.path": "chunked", "loss.chunk_size": 29, "parallel.zero_stage": 3, "run.export": "true"}
    # A large Adam epsilon keeps the update proportional to the gradient (see test_tensor_parallel.py).
    return tiny_run(model, tmp_path_factory.mktemp("cache"), **chunked, **{"optimizer.eps": 1e-3})


def _run(base: dict, out: Path, nproc: int, tp: int) -> str:
    return run_train(nproc, {**base, "parallel.tp": tp, "run.output_dir": out}, timeout=600).stdout


def test_chunked_path_with_tp2_dp2_under_zero3_equals_one_process(base, tmp_path):
    from safetensors.torch import load_file

    _run(base, tmp_path / "tp1", 1, 1)
    log = _run(base, tmp_path / "tp2", 4, 2)
    assert "tensor parallel 2 x data parallel 2, ZeRO-3" in log
    assert "LM head columns [0, 75968)" in log
    got, expected = train_losses(tmp_path / "tp2"), train_losses(tmp_path / "tp1")
    assert got.keys() == expected.keys() == {1, 2, 3}
    for step in got:
        assert math.isclose(got[step], expected[step], rel_tol=1e-5), (step, got[step], expected[step])
    assert not math.isclose(expected[1], expected[3], rel_tol=1e-4)  # the steps changed the weights
    a, b = (load_file(tmp_path / name / "final" / "model.safetensors") for name in ("tp2", "tp1"))
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape, key
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=2e-6)
