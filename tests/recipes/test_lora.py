"""LoRA (PEFT) through recipes/train.py under DeepSpeed on CPU: a tiny random Qwen2 with the real
Qwen2 tokenizer, r 4 on every linear layer, lr 1e-2 (large enough that the adapters move the loss
by ~1% a step, so a wrong gradient shows at the 1e-5 tolerance).

The adapters start with B = 0, so step 1's loss is the base model's whatever LoRA does; the
comparisons therefore use steps 2-3 and the exported adapter weights.
Runs: the ZeRO-3 reference (1 process), ZeRO-2 with 2 ranks, a ZeRO-2 crash + resume, and a bad
target module; about 75 s on 2 cores.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from del_core.config import ConfigError
from del_core.training import load_train_config
from del_core.training.records import read_metrics
from helpers.shared import real_tokenizer
from helpers.training import heldout_ce, make_tiny_qwen2, run_train, tiny_run, train_losses

RTOL = 1e-5  # fp32 round-off between reduction orders (ZeRO stage, ranks)
R, ALPHA = 4, 32.0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))


@pytest.fixture(scope="module")
def base(tiny_model, tmp_path_factory) -> dict:
    """ZeRO-3, gradient checkpointing, 6 held-out rows, export: the reference run's overrides."""
    return tiny_run(
        tiny_model,
        tmp_path_factory.mktemp("cache"),
        **{
            "lora.enabled": "true",
            "lora.r": R,
            "lora.alpha": ALPHA,
            "optimizer.lr": 1e-2,
            "parallel.zero_stage": 3,
            "model.gradient_checkpointing": "true",
            "data.eval_size": 6,
            "run.export": "true",
        },
    )


@pytest.fixture(scope="module")
def reference(base, tmp_path_factory) -> tuple[Path, str]:
    """The ZeRO-3 LoRA run in one process: (output dir, stdout)."""
    out = tmp_path_factory.mktemp("ref")
    proc = run_train(1, {**base, "run.output_dir": out})
    return out, proc.stdout


def _adapter(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "final" / "adapter" / "adapter_model.safetensors")


def _close_losses(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() == {1, 2, 3}
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=RTOL), (step, a[step], b[step])


@pytest.mark.launches
def test_zero3_lora_exports_merged_model_and_adapter(base, reference):
    """The merged export (plain HF keys) and the adapter (PeftModel on the original base) both give
    the held-out CE the run measured in memory at the end; only the adapted layers differ from the
    base, by exactly scaling * B @ A of the exported adapter (the base weights stayed frozen)."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out, stdout = reference
    assert "[lora] r 4, alpha 32, dropout 0, targets all-linear: 14 layers; trainable parameters 4,096 of" in stdout
    losses = train_losses(out)
    assert losses[3] < losses[1] - 1e-2  # the adapters trained
    (final,) = read_metrics(out, "final")
    assert final.after.ce < final.before.ce - 1e-2

    merged_model = AutoModelForCausalLM.from_pretrained(str(out / "final"), dtype=torch.float32)
    assert heldout_ce(merged_model, base) == pytest.approx(final.after.ce, rel=RTOL)
    original = AutoModelForCausalLM.from_pretrained(base["model"], dtype=torch.float32)
    adapted = PeftModel.from_pretrained(original, str(out / "final" / "adapter"))
    assert heldout_ce(adapted, base) == pytest.approx(final.after.ce, rel=RTOL)

    merged = load_file(out / "final" / "model.safetensors")
    initial = load_file(Path(base["model"]) / "model.safetensors")
    assert merged.keys() == initial.keys()  # no lora_A/lora_B/base_layer keys
    adapter = _adapter(out)
    assert len(adapter) == 2 * 14
    for key, weight in initial.items():
        lora_a = adapter.get(f"base_model.model.{key.removesuffix('.weight')}.lora_A.weight")
        if lora_a is None:
            assert torch.equal(merged[key], weight), key  # embeddings, norms, biases: untouched
        else:
            lora_b = adapter[f"base_model.model.{key.removesuffix('.weight')}.lora_B.weight"]
            assert lora_b.abs().max() > 1e-3, key  # B moved away from its zero start
            torch.testing.assert_close(merged[key], weight + (ALPHA / R) * lora_b @ lora_a, rtol=0, atol=1e-6)


@pytest.mark.launches
def test_zero2_two_ranks_equal_one_rank(base, reference, tmp_path):
    """ZeRO-2 with 2 gloo ranks (accumulation 2) vs the ZeRO-3 single process (accumulation 4):
    the same losses at steps 2-3 and the same exported adapter. A rank that updated its adapters
    from its own half of the batch (gradients of the frozen-base model not reduced over the
    ranks), or normalised by its own token count, would export different adapters."""
    out = tmp_path / "run"
    run_train(2, {**base, "parallel.zero_stage": 2, "run.output_dir": out})
    _close_losses(train_losses(out), train_losses(reference[0]))
    expected, got = _adapter(reference[0]), _adapter(out)
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-6)


@pytest.mark.launches
def test_resume_after_a_crash_equals_the_uninterrupted_run(base, reference, tmp_path):
    """ZeRO-2, one process: checkpoint at step 2 (adapters and their optimizer state only, the
    frozen base left out), an abrupt exit in step 3, resume=auto: the losses and the adapter of the
    uninterrupted run."""
    out = tmp_path / "run"
    common = {**base, "parallel.zero_stage": 2, "run.output_dir": out, "run.save_every": 2}
    run_train(1, {**common, "run.fail_at_step": 3}, expect_rc=17)
    assert sorted(train_losses(out)) == [1, 2]
    states = out / "checkpoints" / "step_000002" / "mp_rank_00_model_states.pt"
    saved = torch.load(states, map_location="cpu", weights_only=False)["module"]
    assert sum(".lora_" in k for k in saved) == 2 * 14 and not any(".base_layer." in k for k in saved)
    proc = run_train(1, {**common, "run.resume": "auto"})
    assert "continuing from" in proc.stdout and "step 2" in proc.stdout
    _close_losses(train_losses(out), train_losses(reference[0]))
    expected, got = _adapter(reference[0]), _adapter(out)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-6)


@pytest.mark.launches
def test_unknown_target_module_is_one_line_before_training(base, tmp_path):
    overrides = {**base, "lora.target_modules": "[q_proj,qkv_proj]", "run.output_dir": tmp_path}
    proc = run_train(1, overrides, expect_rc=2, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: lora.target_modules: no module named 'qkv_proj' in Qwen2ForCausalLM"), last
    assert "Traceback" not in proc.stderr and "step      1" not in proc.stdout


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["lora.enabled=true", "lora.r=0"], "lora.r must be >= 1 with lora.enabled=true, got 0"),
        (["lora.enabled=true", "lora.dropout=1.0"], "lora.dropout must be in [0, 1)"),
        (["lora.enabled=true", "lora.target_modules=[]"], "lora.target_modules must be non-empty"),
        (["lora.enabled=true", "parallel.tp=2"], "lora.enabled=true with parallel.tp > 1 is not supported"),
        (["lora.rank=8"], "unknown key 'lora.rank'"),
    ],
)
def test_bad_lora_keys_are_refused_by_the_config(overrides, message):
    """The checks run when the configuration loads (train.py prints them as one `error:` line with
    exit status 2, before anything is loaded, as test_train checks for other keys)."""
    with pytest.raises(ConfigError) as err:
        load_train_config(None, ["data=synthetic:8", *overrides])
    assert message in str(err.value) and "\n" not in str(err.value)
