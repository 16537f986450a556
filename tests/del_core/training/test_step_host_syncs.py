"""The training loop synchronises host and device at most once per optimizer step.

Counted on CPU with ``helpers.host_syncs`` (the ops that would stall the host on a GPU: reads of a
tensor's value, ``nonzero``, copies of host data to a device), attributed to the file that asked
for them, over one ``Trainer.train_step()`` + ``maybe_checkpoint()`` of a tiny Qwen2 with gradient
accumulation 2 (``helpers/step_sync_worker.py``, in its own process). The loop's own code
(del_core/training, /parallel, /data) may read the device once: the step's metrics, counts, grad
norm, peak memory and stop flag together. The collation of the step's batches on the host
(``Trainer._micro_batches``, and ``Trainer._rank_part``: each rank's part of them, with its scored
positions under ``loss.compact``) is reported apart: it works on host memory only, where the counter,
which on CPU cannot tell host tensors from device ones, sees ``torch.tensor(list)`` and reads of
the CPU copies that cost no device sync. The loss, transformers and DeepSpeed are reported, not
held to a budget here (tests/del_core/losses/test_host_syncs.py holds the loss to zero).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers.training import make_tiny_qwen2

pytestmark = pytest.mark.launches

pytest.importorskip("deepspeed")

WORKER = Path(__file__).resolve().parents[2] / "helpers" / "step_sync_worker.py"
LOOP = ("/del_core/training/", "/del_core/parallel/", "/del_core/data/")
REPORTED = ("/del_core/losses/", "/transformers/", "/deepspeed/")
BUDGET = 1


@pytest.fixture(scope="module")
def report(qwen2_tokenizer, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("step_syncs")
    model = make_tiny_qwen2(work / "model", qwen2_tokenizer)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(model), str(work)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"worker exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _from(events: list[list[str]], markers: tuple[str, ...]) -> list[list[str]]:
    return [e for e in events if any(marker in e[2] for marker in markers)]


def _summary(events: list[list[str]]) -> str:
    counts = Counter((kind, origin) for kind, origin, _ in events)
    return "\n".join(f"  {n} x {kind} at {origin}" for (kind, origin), n in counts.most_common()) or "  (none)"


def test_one_optimizer_step_syncs_the_host_at_most_once(report):
    events, host = report["step"]["events"], report["step"]["host_batches"]
    loop = _from(events, LOOP)
    print(f"\nloop code (del_core/training, /parallel, /data): {len(loop)}\n{_summary(loop)}")
    print(f"host-side batch preparation (apart): {len(host)}\n{_summary(host)}")
    for marker in REPORTED:
        found = _from(events, (marker,))
        print(f"{marker}: {len(found)}\n{_summary(found)}")
    assert len(loop) <= BUDGET, f"{len(loop)} host syncs in the loop's code per step (budget {BUDGET}):\n" + _summary(
        loop
    )
    assert {kind for kind, _, _ in loop} <= {"tolist"}, "the one read should be a single tolist:\n" + _summary(loop)


def test_a_compacted_step_adds_no_host_sync(report):
    """Under loss.compact the scored positions come with the batch, found on the host: the loss
    (the gather of the rows, the LM head on them) adds no sync, and the loop keeps its one read."""
    events = report["compact_step"]["events"]
    loop, losses = _from(events, LOOP), _from(events, ("/del_core/losses/",))
    print(f"\ncompacted step: loop {len(loop)}, del_core/losses {len(losses)}\n{_summary(loop + losses)}")
    assert len(loop) <= BUDGET and {kind for kind, _, _ in loop} <= {"tolist"}, _summary(loop)
    assert losses == [], "the compacted loss synced:\n" + _summary(losses)


def test_a_bad_label_id_is_named_before_the_model_sees_the_batch(report):
    bad = report["bad_label"]
    assert bad["error"] == "ValueError", bad
    assert bad["engine_calls"] == 0, f"{bad['engine_calls']} micro-batch(es) reached the model first"
    message = bad["message"]
    assert str(bad["bad_id"]) in message and "micro-batch 0" in message and "row 0" in message, message
    assert f"position {bad['position']}" in message, message


def test_a_stop_request_ends_the_loop_from_the_step_read(report):
    assert report["stop"]["stopped"] is True, report["stop"]


def test_the_model_trains_in_training_mode_from_the_first_step(report):
    """from_pretrained returns an eval-mode model; transformers checkpoints layers only in training
    mode, so a trainer that left it so would train without gradient checkpointing (and dropout)."""
    assert report["modes"]["eval_mode_modules"] == []
