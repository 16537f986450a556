"""``parallel.engine=ddp`` (torch DistributedDataParallel) against the other engines and one
process, on CPU (gloo): a tiny random Qwen2 (tied head) with the real Qwen2 tokenizer, 3 steps of
global batch 8 (micro 2: accumulation 4 at 1 rank, 2 at 2 ranks), fp32, the DEL loss.

The same run at 2 ranks under DDP, DeepSpeed ZeRO-2 and FSDP2 takes the steps of one process
(losses, gradient norms, exported weights), on the logits and the chunked loss path; a DDP run
whose gradients are not scaled to the sum over ranks differs; DDP's checkpoints (COMPLETE.json,
CRC-checked) resume at another world size; LoRA trains and exports alike at 1 and 2 ranks. Each
run is started once and shared by the assertions (:class:`LazyRuns`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from del_core.config import ConfigError
from del_core.engines import ENGINE_NAMES, backend_type
from del_core.training import load_train_config
from del_core.training.run_folder.identity import run_identity
from helpers.shared import REPO, real_tokenizer
from helpers.torchrun import torchrun_command
from helpers.training import LazyRuns, assert_same_run, make_tiny_qwen2, records, tiny_run

# fp32 round-off between reduction orders, carried by Adam's first steps (see test_fsdp2.py):
# the losses agree to 1e-5, the gradient norms to 1e-4 (relative).
LOSS_RTOL, NORM_RTOL = 1e-5, 1e-4
ENGINES_AT_2 = {
    "ddp": {"parallel.engine": "ddp"},
    "zero2": {"parallel.engine": "deepspeed", "parallel.zero_stage": 2},
    "fsdp2": {"parallel.engine": "fsdp2"},
}
CHUNKED = {"loss.path": "chunked", "loss.chunk_size": 64}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> LazyRuns:
    model = make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))
    base = tiny_run(model, tmp_path_factory.mktemp("cache"), **{"parallel.engine": "ddp", "run.export": "true"})
    return LazyRuns(base, tmp_path_factory.mktemp)


def _checkpointed(runs: LazyRuns) -> Path:
    """DDP at 2 ranks, logits, a checkpoint after every step, all kept."""
    return runs("ddp", 2, **{"run.save_every": 1, "run.save_total_limit": 0})


def _same_steps(got: Path, expected: Path, steps: list[int]) -> None:
    a = {r["step"]: r for r in records(got)}
    b = {r["step"]: r for r in records(expected)}
    assert sorted(a) == steps, sorted(a)
    for step in steps:
        assert math.isclose(a[step]["loss"], b[step]["loss"], rel_tol=LOSS_RTOL), (step, a[step], b[step])
        assert math.isclose(a[step]["grad_norm"], b[step]["grad_norm"], rel_tol=NORM_RTOL), (step, a[step], b[step])


@pytest.mark.launches
@pytest.mark.slow
@pytest.mark.parametrize("path", ["logits", "chunked"])
def test_ddp_zero2_and_fsdp2_at_two_ranks_take_the_steps_of_one_process(runs, path):
    """Losses to 1e-5, gradient norms to 1e-4, exported weights to fp32 round-off, each path
    against one process on the same path."""
    chunked = CHUNKED if path == "chunked" else {}
    one = runs(f"one-{path}" if chunked else "one", 1, **chunked)
    for engine, overrides in ENGINES_AT_2.items():
        out = (
            _checkpointed(runs)
            if engine == "ddp" and not chunked
            else runs(f"{engine}-{path}", 2, **overrides, **chunked)
        )
        _same_steps(out, one, [1, 2, 3])
        assert_same_run(out, one, NORM_RTOL, grad_norm=True)
    assert "DDP (whole replicas)" in runs.procs("one").stdout
    losses = [r["loss"] for r in records(one)]
    assert losses[0] != pytest.approx(losses[-1], rel=1e-3)  # the steps changed the weights


@pytest.mark.launches
@pytest.mark.slow
def test_gradients_not_scaled_to_the_sum_over_ranks_are_seen(runs, tmp_path):
    """The broken variant: DDP averages the gradients over the ranks and the trainer does not
    multiply the losses back. Adam hides the factor in the losses, the gradient norms do not."""
    overrides = {**runs.base, "run.output_dir": tmp_path}
    args = [f"{k}={v}" for k, v in overrides.items()]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = torchrun_command(2, REPO / "tests" / "helpers" / "ddp_unaveraged_train.py", *args)
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with pytest.raises(AssertionError):
        _same_steps(tmp_path, runs("one", 1), [1, 2, 3])
    broken, right = records(tmp_path), records(_checkpointed(runs))
    assert broken[0]["grad_norm"] == pytest.approx(right[0]["grad_norm"] / 2, rel=NORM_RTOL)


@pytest.mark.launches
@pytest.mark.slow
def test_checkpoints_are_verified_and_resume_at_another_world_size(runs):
    """2 -> 1 rank from step 1: the uninterrupted 2-rank run's steps 2 and 3. The checkpoint has
    the trainer's marker with every file's size and CRC-32."""
    two = _checkpointed(runs)
    step1 = two / "checkpoints" / "step_000001"
    marker = json.loads((step1 / "COMPLETE.json").read_text())
    assert {"model.pt", "optimizer.pt", "engine_state.pt", "rng_rank0.pt", "rng_rank1.pt"} <= set(marker["files"])
    assert all(len(entry["crc32"]) == 8 for entry in marker["files"].values())
    assert "parallel.world_size" not in marker["identity"]
    one = runs("resumed-at-1", 1, **{"run.resume": step1})
    _same_steps(one, two, [2, 3])
    assert "continuing from" in runs.procs("resumed-at-1").stdout


@pytest.mark.launches
@pytest.mark.slow
def test_lora_at_two_ranks_trains_and_exports_like_one_process(runs):
    """Only the adapters train; the merged export and the adapter of 2 ranks are 1 process's."""
    lora = {"lora.enabled": "true", "lora.r": 4, "run.save_every": 3}
    two, one = runs("lora-two", 2, **lora), runs("lora-one", 1, **lora)
    assert_same_run(two, one, NORM_RTOL, grad_norm=True)
    assert (two / "final" / "adapter").is_dir()
    saved = json.loads((two / "checkpoints" / "step_000003" / "COMPLETE.json").read_text())["files"]
    assert saved["model.pt"]["size"] < 100_000  # the adapters only, not the 151,936-row embedding


@pytest.mark.parametrize(
    "override, key",
    [
        ("parallel.tp=2", "parallel.tp"),
        ("parallel.sp=2", "parallel.sp"),
        ("parallel.zero_stage=2", "parallel.zero_stage"),
        ("parallel.offload=true", "parallel.offload"),
        ("optimizer.name=deepspeed", "optimizer.name"),
    ],
)
def test_what_ddp_does_not_combine_with_is_refused_by_name(override, key):
    """Refused while the configuration is read: before any process group, tokenizer or model."""
    with pytest.raises(ConfigError, match=f"{key}=.*parallel.engine=ddp"):
        load_train_config(None, ["data=synthetic:8", "parallel.engine=ddp", override])


def test_ddp_is_one_row_of_the_registry_and_its_checkpoints_reshard():
    assert ENGINE_NAMES == ("deepspeed", "fsdp2", "ddp") and backend_type("ddp").name == "ddp"
    identity = run_identity(load_train_config(None, ["data=synthetic:8", "parallel.engine=ddp"]), 8, 3, 2)
    assert "parallel.world_size" not in identity and identity["parallel.engine"] == "ddp"
    load_train_config(None, ["data=synthetic:8", "parallel.engine=ddp", "lora.enabled=true"])  # LoRA is fine
    with pytest.raises(ConfigError, match="parallel.engine must be one of deepspeed, fsdp2, ddp"):
        load_train_config(None, ["data=synthetic:8", "parallel.engine=dp"])
