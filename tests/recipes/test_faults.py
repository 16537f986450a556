"""Fault injection on recipes/train.py: the situations a cluster run meets - a resume with
a changed setting, a re-run into a finished folder, a damaged newest checkpoint, Ctrl-C, kill -9
during a checkpoint write - each with the behaviour the run must have.

One process per run (the tiny random Qwen2 of tests/recipes/test_train.py, 4 steps); one straight
run is the reference that the other runs copy or compare with. 7 launches, ~2.5 min of CPU.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from del_core.training.run_folder import checkpoints
from del_core.training.schedule import warmup_cosine
from helpers.shared import real_tokenizer
from helpers.training import REPO, TRAIN, make_tiny_qwen2, records, run_train, tiny_run, train_losses

pytestmark = [pytest.mark.slow, pytest.mark.launches]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    model = make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))
    return {**tiny_run(model, tmp_path_factory.mktemp("cache")), "run.max_steps": 4, "run.save_total_limit": 4}


@pytest.fixture(scope="module")
def straight(base, tmp_path_factory) -> Path:
    """4 uninterrupted steps with checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("straight") / "run"
    run_train(1, {**base, "run.save_every": 2, "run.output_dir": out})
    return out


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


class Started:
    """recipes/train.py running in the background, its output going to files (a pipe nobody reads
    would block it)."""

    def __init__(self, overrides: dict, logs: Path):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
        args = [f"{k}={v}" for k, v in overrides.items()]
        logs.mkdir(parents=True, exist_ok=True)
        self.out, self.err = logs / "stdout", logs / "stderr"
        with open(self.out, "w") as stdout, open(self.err, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(TRAIN), *args], cwd=REPO, env=env, stdout=stdout, stderr=stderr
            )

    def poll(self):
        return self.proc.poll()

    def finish(self, timeout: float = 240) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once the process has ended."""
        code = self.proc.wait(timeout=timeout)
        return code, self.out.read_text(), self.err.read_text()


def _wait_for_step(out: Path, step: int, proc: Started, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and any(r["step"] >= step for r in records(out)):
            return
        assert proc.poll() is None, proc.finish()
        time.sleep(0.02)
    raise AssertionError(f"no step {step} in {out}/metrics.jsonl after {timeout} s")


def _status(out: Path) -> dict:
    return json.loads((out / "run_status.json").read_text())


def _one_line_error(proc: subprocess.CompletedProcess, *parts: str) -> None:
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(p in last for p in parts), last


def test_resume_with_another_loss_or_lr_is_refused_before_the_model_loads(base, straight, tmp_path):
    """Today: the old schedule continues with the new lr ignored; loss=mle runs MLE on a DEL checkpoint."""
    out = _copy(straight, tmp_path / "run")
    before = (out / "metrics.jsonl").read_bytes()
    changed = {**base, "run.output_dir": out, "run.resume": "auto", "loss": "mle", "optimizer.lr": 5e-4}
    proc = run_train(1, changed, expect_rc=2)
    _one_line_error(
        proc,
        "step_000004 was written by a run that computes differently",
        "loss.name: checkpoint 'del', now 'mle'",
        "optimizer.lr: checkpoint 0.001, now 0.0005",
        "run.resume_override=[loss.name,optimizer.lr]",
    )
    assert "[model]" not in proc.stdout and (out / "metrics.jsonl").read_bytes() == before


def test_an_lr_override_takes_effect_from_the_resumed_step_and_is_recorded(base, straight, tmp_path):
    out = _copy(straight, tmp_path / "run")
    shutil.rmtree(out / "checkpoints" / "step_000004")  # resume from step 2
    overrides = {"run.output_dir": out, "run.resume": "auto", "run.save_every": 2}
    run_train(1, {**base, **overrides, "optimizer.lr": 5e-4, "run.resume_override": "[optimizer.lr]"})
    factor = warmup_cosine(4, 0.0)
    lrs = {r["step"]: r["lr"] for r in records(out)}
    assert [r["step"] for r in records(out)] == [1, 2, 3, 4]  # metrics.jsonl cut back to step 2 first
    assert lrs[2] == pytest.approx(1e-3 * factor(1)) and lrs[3] == pytest.approx(5e-4 * factor(2))
    assert lrs[4] == pytest.approx(5e-4 * factor(3))
    (resumed,) = records(out, "resume")
    assert resumed["step"] == 2 and resumed["overrides"] == {"optimizer.lr": [1e-3, 5e-4]}
    marker = checkpoints.read_state(out / "checkpoints" / "step_000004")
    assert marker["overrides"] == [{"key": "optimizer.lr", "saved": 1e-3, "now": 5e-4, "step": 2}]
    assert marker["identity"]["optimizer.lr"] == 5e-4
    assert len(records(out, "final")) == 1


def test_a_new_run_into_a_finished_folder_is_refused(base, straight, tmp_path):
    """Today: a plain re-run appends a second run's records to metrics.jsonl. (A second run into a
    folder a live run holds: test_run_reliability's lock tests.)"""
    out = _copy(straight, tmp_path / "run")
    before = (out / "metrics.jsonl").read_bytes()
    proc = run_train(1, {**base, "run.output_dir": out}, expect_rc=2, timeout=120)
    _one_line_error(proc, "already holds a run (status finished at step 4)", "run.overwrite=true")
    assert (out / "metrics.jsonl").read_bytes() == before


def test_ctrl_c_saves_and_a_truncated_newest_checkpoint_falls_back(base, straight, tmp_path):
    """Ctrl-C after step 2: the step finishes, a checkpoint is written, exit 130 with the resume
    command, status "stopped". The newest checkpoint is then truncated: resume=auto names the file,
    falls back to the one before, and the losses equal the uninterrupted run's, each step once."""
    out = tmp_path / "run"
    overrides = {**base, "run.output_dir": out, "run.save_every": 1}
    proc = Started(overrides, tmp_path / "logs")
    _wait_for_step(out, 2, proc)
    proc.proc.send_signal(signal.SIGINT)
    code, stdout, stderr = proc.finish()
    assert code == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "run.resume=auto" in stdout.split("resume with:")[1]
    stopped = _status(out)
    assert stopped["status"] == "stopped" and 2 <= stopped["step"] < 4, stopped
    newest = out / "checkpoints" / checkpoints.tag_for(stopped["step"])
    shard = max((p for p in newest.iterdir() if p.name != checkpoints.MARKER), key=lambda p: p.stat().st_size)
    with open(shard, "r+b") as handle:
        handle.truncate(shard.stat().st_size // 2)

    resumed = run_train(1, {**overrides, "run.resume": "auto"})
    assert f"skipping {newest.name}: {shard} has" in resumed.stdout
    assert f"continuing from {out / 'checkpoints' / checkpoints.tag_for(stopped['step'] - 1)}" in resumed.stdout
    assert [r["step"] for r in records(out)] == [1, 2, 3, 4]
    assert train_losses(out) == train_losses(straight)
    assert _status(out)["status"] == "finished"


def test_a_second_ctrl_c_stops_at_once(base, tmp_path):
    out = tmp_path / "run"
    proc = Started({**base, "run.output_dir": out, "run.max_steps": 40}, tmp_path / "logs")
    _wait_for_step(out, 1, proc)
    proc.proc.send_signal(signal.SIGINT)
    # Two signals that arrive before Python's handler has run are one (the pending flag is set
    # once): the second Ctrl-C is sent once the first one has been handled, as a user's would be.
    deadline = time.time() + 60
    while "[stop] Ctrl-C" not in proc.err.read_text() and time.time() < deadline:
        assert proc.poll() is None, proc.finish()
        time.sleep(0.01)
    proc.proc.send_signal(signal.SIGINT)
    code, _, stderr = proc.finish(120)
    assert code == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert "second Ctrl-C: stopped at once" in stderr
    status = _status(out)
    assert status["status"] == "interrupted" and status["step"] < 40
    assert not (out / "checkpoints").exists()


def test_kill_9_during_a_checkpoint_write_leaves_a_verified_one_to_resume(base, tmp_path):
    """SIGKILL at a random moment while the checkpoint of step 2 or 3 is being written (its folder
    exists, its marker may not yet): resume=auto's choice is a complete checkpoint that verifies,
    the one of the step before when the kill came first. (That a resume from a verified checkpoint
    repeats the uninterrupted losses: the Ctrl-C test.)"""
    out = tmp_path / "run"
    overrides = {**base, "run.output_dir": out, "run.save_every": 1}
    proc = Started(overrides, tmp_path / "logs")
    target = out / "checkpoints" / checkpoints.tag_for(random.choice((2, 3)))
    delay = random.uniform(0.0, 0.3)
    deadline = time.time() + 240
    while not target.is_dir() and time.time() < deadline:
        assert proc.poll() is None, proc.finish()
        time.sleep(0.005)
    time.sleep(delay)
    proc.proc.kill()  # SIGKILL
    proc.finish()
    chosen = checkpoints.choose("auto", out, lambda _: None)
    assert chosen is not None and checkpoints.verify(chosen.path, chosen.state) is None, delay
    assert set(chosen.state["files"]) == {p.name for p in chosen.path.iterdir()} - {checkpoints.MARKER}
    written = int(target.name[len("step_") :])
    if (target / checkpoints.MARKER).is_file():  # the kill came after the save (maybe after a later one)
        assert chosen.step >= written, (delay, chosen.path)
    else:  # half-written: ignored, the one before it is taken
        assert chosen.step == written - 1, (delay, chosen.path)
