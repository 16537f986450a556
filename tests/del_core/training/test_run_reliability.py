"""The run-reliability parts without a training run: checkpoint manifests and their verification
with fallback, the output-folder lock, the finished-folder check, the metrics cut-back and the
run identity comparison."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from del_core.config import ConfigError
from del_core.training.config import TrainConfig
from del_core.training.records import cut_back, read_metrics
from del_core.training.run_folder import checkpoints
from del_core.training.run_folder import lock as run_lock
from del_core.training.run_folder.identity import FREE_KEYS, compare, run_identity, saved_identity


def _fake_checkpoint(root: Path, step: int) -> Path:
    """A complete checkpoint directory with two shard files and a manifest marker."""
    path = root / checkpoints.tag_for(step)
    path.mkdir(parents=True)
    (path / "model_states.pt").write_bytes(bytes(range(256)) * (10 + step))
    (path / "optim_states.pt").write_bytes(b"\x07" * 5000)
    checkpoints.mark_complete(path, {"step": step, "files": checkpoints.manifest(path)})
    return path


def _logged() -> tuple[list[str], callable]:
    lines: list[str] = []
    return lines, lines.append


def test_manifest_records_size_and_crc32(tmp_path):
    path = _fake_checkpoint(tmp_path, 3)
    state = checkpoints.read_state(path)
    assert state["files"]["optim_states.pt"] == {
        "size": 5000,
        "crc32": format(zlib.crc32(bytes([7]) * 5000), "08x"),
    }
    assert checkpoints.verify(path, state) is None


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-1]), "has 3583 bytes, the manifest says 3584"),
        (lambda p: p.write_bytes(b"\xff" + p.read_bytes()[1:]), "has CRC-32"),
        (lambda p: p.unlink(), "is missing"),
    ],
    ids=["truncated", "corrupted", "deleted"],
)
def test_resume_auto_falls_back_past_a_damaged_newest_checkpoint(tmp_path, damage, message):
    root = checkpoints.checkpoint_root(tmp_path)
    _fake_checkpoint(root, 2)
    newest = _fake_checkpoint(root, 4)
    damage(newest / "model_states.pt")
    lines, log = _logged()
    chosen = checkpoints.choose("auto", tmp_path, log)
    assert chosen.step == 2
    assert f"skipping step_000004: {newest / 'model_states.pt'} {message}" in lines[-1]
    with pytest.raises(ConfigError, match="run.resume: .*step_000004 is damaged"):
        checkpoints.choose(str(newest), tmp_path, log)


def test_no_intact_checkpoint_is_one_line_error(tmp_path):
    root = checkpoints.checkpoint_root(tmp_path)
    for step in (2, 4):
        (_fake_checkpoint(root, step) / "optim_states.pt").write_bytes(b"x")
    with pytest.raises(ConfigError) as err:
        checkpoints.choose("auto", tmp_path, lambda _: None)
    assert str(err.value) == f"run.resume=auto: no intact checkpoint in {root} (damaged: step_000004, step_000002)"


def test_marker_without_manifest_is_accepted_unverified(tmp_path):
    root = checkpoints.checkpoint_root(tmp_path)
    (root / "step_000005").mkdir(parents=True)
    checkpoints.mark_complete(root / "step_000005", {"step": 5})
    assert checkpoints.choose("auto", tmp_path, lambda _: None).step == 5


# --- the lock ------------------------------------------------------------------------------------
_HOLD = (
    "import sys, time; from pathlib import Path; from del_core.training.run_folder import lock as run_lock; "
    "run_lock.acquire(Path(sys.argv[1]), print); print('held', flush=True); time.sleep(60)"
)


@pytest.mark.launches  # the lock's other holder is another process
def test_a_second_run_into_a_locked_folder_is_refused_naming_the_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            ConfigError, match=f"in use by another run \\(pid {holder.pid} on host {socket.gethostname()}"
        ):
            run_lock.acquire(tmp_path, print)
    finally:
        holder.kill()
        holder.wait()
    # The holder died without releasing: the kernel dropped its flock; the file still names it.
    lines, log = _logged()
    lock = run_lock.acquire(tmp_path, log)
    assert f"taking over the lock of pid {holder.pid}" in lines[0]
    assert json.loads((tmp_path / ".lock").read_text()) == {"host": socket.gethostname(), "pid": os.getpid()}
    lock.release()
    assert not (tmp_path / ".lock").exists()


@pytest.mark.launches  # the lock's other holder is another process
def test_a_stale_lock_held_by_an_orphan_is_taken_over(tmp_path):
    """The lock's holder (recorded pid) is dead but a forked child still holds the flock."""
    code = (
        "import os, sys, time; from pathlib import Path; from del_core.training.run_folder import lock as run_lock; "
        "run_lock.acquire(Path(sys.argv[1]), print)\n"
        "child = os.fork()\nif child == 0:\n    time.sleep(60)\n"
        "else:\n    print(os.getpid(), child, flush=True); os._exit(0)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    dead, orphan = map(int, parent.stdout.readline().split())
    parent.wait()
    lines, log = _logged()
    try:
        lock = run_lock.acquire(tmp_path, log)
        assert f"holder pid {dead} on {socket.gethostname()} is gone; taking the stale lock over" in lines[0]
        lock.release()
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_a_new_run_into_a_finished_folder_needs_resume_or_overwrite(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n')
    (tmp_path / "run_status.json").write_text('{"status": "finished", "step": 4}')
    (tmp_path / "checkpoints" / "step_000004").mkdir(parents=True)
    with pytest.raises(ConfigError, match="already holds a run \\(status finished at step 4\\): continue it with"):
        run_lock.claim_folder(tmp_path, "no", False, print)
    run_lock.claim_folder(tmp_path, "auto", False, print)  # resuming is the point
    lines, log = _logged()
    run_lock.claim_folder(tmp_path, "no", True, log)
    assert run_lock.previous_run(tmp_path) == [] and "removed metrics.jsonl, run_status.json, checkpoints" in lines[0]


# --- metrics.jsonl -------------------------------------------------------------------------------
def test_cut_back_keeps_the_run_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [
        {"kind": "eval", "label": "before", "step": 0},
        *({"kind": "train", "step": s} for s in (1, 2, 3)),
        {"kind": "eval", "label": "during", "step": 2},
        {"kind": "eval", "label": "after", "step": 3},
        {"kind": "final", "step": 3},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "train", "st')  # a torn last line
    assert cut_back(path, 2) == 4  # step 3, the after evaluation, the final record, the torn line
    assert [json.loads(x) for x in path.read_text().splitlines()] == rows[:3] + [rows[4]]
    assert cut_back(path, 0) == 4 and path.read_text() == ""
    assert cut_back(tmp_path / "absent.jsonl", 3) == 0


def test_resume_record_round_trips(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        json.dumps({"step": 2, "checkpoint": "c", "overrides": {"optimizer.lr": [1e-3, 5e-4]}, "kind": "resume"}) + "\n"
    )
    (record,) = read_metrics(path)
    assert record.step == 2 and record.overrides == {"optimizer.lr": [1e-3, 5e-4]}


# --- identity ------------------------------------------------------------------------------------
def test_identity_holds_what_changes_the_computation():
    identity = run_identity(TrainConfig(), 40, 4, 2)
    for key in ("loss.name", "loss.weight", "optimizer.lr", "optimizer.warmup_ratio", "data.source", "model.name"):
        assert key in identity
    assert identity["run.total_steps"] == 4 and identity["parallel.world_size"] == 2
    assert not FREE_KEYS & identity.keys()
    assert "lora.r" not in identity  # LoRA off: its settings do not matter


def test_compare_names_each_differing_key_with_both_values():
    saved = run_identity(TrainConfig(), 40, 4, 1)
    changed = TrainConfig()
    changed.loss.name, changed.optimizer.lr = "mle", 5e-5
    now = run_identity(changed, 40, 4, 1)
    with pytest.raises(ConfigError) as err:
        compare("ckpt", saved, now, [], 3)
    assert "loss.name: checkpoint 'del', now 'mle'; optimizer.lr: checkpoint 5e-06, now 5e-05" in str(err.value)
    assert "run.resume_override=[loss.name,optimizer.lr]" in str(err.value)
    (override,) = compare("ckpt", saved, {**now, "loss.name": "del"}, ["optimizer.lr"], 3)
    assert (override.key, override.saved, override.now, override.step) == ("optimizer.lr", 5e-06, 5e-05, 3)
    assert [o.key for o in compare("c", saved, {**saved, "run.total_steps": 8}, ["run.max_steps"], 3)] == [
        "run.total_steps"
    ]
    with pytest.raises(ConfigError, match="model.name cannot be overridden"):
        compare("c", saved, {**saved, "model.name": "other"}, ["model.name"], 3)


def test_markers_of_the_flat_identity_are_still_compared():
    legacy = {"tp": 1, "num_items": 40, "seed": 42, "loss": "del", "total_steps": 4, "lora": "off", "step": 2}
    assert saved_identity(legacy) == {
        "parallel.tp": 1,
        "data.num_items": 40,
        "run.seed": 42,
        "loss.name": "del",
        "run.total_steps": 4,
    }
    with pytest.raises(ConfigError, match="run.seed: checkpoint 42, now 7"):
        compare("c", saved_identity(legacy), {"run.seed": 7, "parallel.tp": 1}, [], 2)


def test_resume_override_parses_from_the_command_line():
    from del_core.training import load_train_config

    config = load_train_config(None, ["run.resume_override=[optimizer.lr,loss.weight]", "run.overwrite=true"])
    assert list(config.run.resume_override) == ["optimizer.lr", "loss.weight"] and config.run.overwrite
    with pytest.raises(ConfigError, match="dotted keys"):
        load_train_config(None, ["run.resume_override=[lr]"])


def test_ranks_share_the_reading_and_agree_on_the_checkpoint(tmp_path):
    """Each rank checksums every ranks-th file (all sizes); all_intact makes them agree."""
    root = checkpoints.checkpoint_root(tmp_path)
    _fake_checkpoint(root, 2)
    newest = _fake_checkpoint(root, 4)
    shard = newest / "model_states.pt"  # the first file of the manifest: rank 0's share of 2
    shard.write_bytes(b"\xff" + shard.read_bytes()[1:])
    state = checkpoints.read_state(newest)
    assert checkpoints.verify(newest, state, (1, 2)) is None
    assert "has CRC-32" in checkpoints.verify(newest, state, (0, 2))
    votes: list[bool] = []

    def rank1_all_intact(intact: bool) -> bool:  # rank 0 (not run here) found step 4 damaged
        votes.append(intact)
        return intact and len(votes) > 1

    lines, log = _logged()
    assert checkpoints.choose("auto", tmp_path, log, (1, 2), rank1_all_intact).step == 2
    assert votes == [True, True] and "another rank found a damaged file" in lines[-1]


# --- interrupts and the status file ---------------------------------------------------------------
@pytest.fixture
def restored_signals():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_ctrl_c_asks_for_a_clean_stop_with_exit_code_130(restored_signals):
    from del_core.training.run_folder import StopRequest

    stop = StopRequest()
    os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the handler only records it
    assert stop.requested and stop.exit_code == 130
    term = StopRequest()
    os.kill(os.getpid(), signal.SIGTERM)
    assert term.requested and term.exit_code == 0  # the slurm launcher requeues on status "stopped"


def test_an_exception_marks_the_run_failed_never_running(tmp_path, monkeypatch, restored_signals):
    from del_core.parallel import ParallelDims
    from del_core.training import trainer as trainer_module
    from del_core.training.run_folder import RunFolder, StopRequest

    def setup(self):
        self.stop = StopRequest()
        self.folder = RunFolder(self.output_dir, ParallelDims(world=1, rank=0, tp=1, dp=1, dp_rank=0), print)
        self.folder.mark_running(2, self.stop)
        self.step = 2

    def train(self):
        raise FloatingPointError("step 3: the loss is nan")

    monkeypatch.setattr(trainer_module.Trainer, "setup", setup)
    monkeypatch.setattr(trainer_module.Trainer, "train", train)
    config = TrainConfig()
    config.run.output_dir = str(tmp_path)
    with pytest.raises(FloatingPointError):
        trainer_module.run(config)
    assert json.loads((tmp_path / "run_status.json").read_text()) == {"status": "failed", "step": 2}
