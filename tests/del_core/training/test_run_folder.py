"""RunFolder, the one object through which the trainer keeps OUTPUT_DIR: a resume checked against
the run's identity (refused, or overriding on purpose), the records and status a run begins with,
the end of a run (answers, "finished") and a failure ("failed", never "running"). One process, no
process group; the checkpoints are complete directories with their marker, as a save leaves them
(a DeepSpeed save and load are exercised end to end by tests/recipes/test_faults.py)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from del_core.config import ConfigError
from del_core.data.jsonl import read_jsonl
from del_core.parallel import ParallelDims
from del_core.training.config import TrainConfig
from del_core.training.records import read_metrics
from del_core.training.reporting import Reporter, SilentReporter
from del_core.training.run_folder import RunFolder, StopRequest, checkpoints
from del_core.training.run_folder.identity import run_identity
from del_core.training.run_folder.lock import LOCK_FILE

ONE_RANK = ParallelDims(world=1, rank=0, tp=1, dp=1, dp_rank=0)
CPU = torch.device("cpu")


@pytest.fixture
def stop():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    yield StopRequest()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _config(output_dir: Path, *, lr: float = 5e-6, resume: str = "auto", override: tuple = ()) -> TrainConfig:
    config = TrainConfig()
    config.run.output_dir, config.run.resume = str(output_dir), resume
    config.run.report_to = ["jsonl"]
    config.optimizer.lr = lr
    config.run.resume_override = list(override)
    return config


def _checkpoint(output_dir: Path, step: int, identity: dict, overrides: list[dict]) -> Path:
    """A complete checkpoint of ``step`` whose marker records ``identity`` and ``overrides``."""
    path = checkpoints.checkpoint_root(output_dir) / checkpoints.tag_for(step)
    path.mkdir(parents=True)
    (path / "model_states.pt").write_bytes(bytes(range(256)) * step)
    state = {"identity": identity, "overrides": overrides, "step": step, "files": checkpoints.manifest(path)}
    checkpoints.mark_complete(path, state)
    return path


def _folder(path: Path) -> tuple[RunFolder, list[str]]:
    lines: list[str] = []
    return RunFolder(path, ONE_RANK, lines.append), lines


def test_a_resume_that_computes_differently_is_refused_before_anything_is_written(tmp_path):
    _checkpoint(tmp_path, 2, run_identity(_config(tmp_path), 40, 4, 1), [])
    folder, _ = _folder(tmp_path)
    with pytest.raises(
        ConfigError, match=r"optimizer.lr: checkpoint 5e-06, now 0.0001.*resume_override=\[optimizer.lr\]"
    ):
        folder.find_resume(_config(tmp_path, lr=1e-4), 40, 4, CPU)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]


def test_a_resume_with_an_override_begins_its_records_with_it(tmp_path, stop):
    earlier = [{"key": "optimizer.warmup_ratio", "saved": 0.1, "now": 0.0, "step": 1}]
    saved_identity = {**run_identity(_config(tmp_path), 40, 4, 1), "optimizer.warmup_ratio": 0.0}
    checkpoint = _checkpoint(tmp_path, 2, saved_identity, earlier)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"kind": "train", "step": s}) + "\n" for s in (1, 2, 3)))
    config = _config(tmp_path, lr=1e-4, override=("optimizer.lr",))
    config.optimizer.warmup_ratio = 0.0
    folder, lines = _folder(tmp_path)
    folder.claim(config.run.resume, config.run.overwrite)

    assert folder.find_resume(config, 40, 4, CPU).path == checkpoint
    assert folder.changed_at(2) == {"optimizer.lr": [5e-06, 1e-04]}
    assert folder.changed_at(1) == {"optimizer.warmup_ratio": [0.1, 0.0]}  # the earlier resume's
    reporter = folder.begin(2, config, 4, stop)
    reporter.close()

    assert isinstance(reporter, Reporter) and stop.status_dir == tmp_path
    assert "[resume] run.resume_override: optimizer.lr 5e-06 -> 0.0001 from step 3" in lines
    assert "[resume] metrics.jsonl cut back to step 2 (1 later records removed)" in lines
    assert [(r["kind"], r["step"]) for r in read_jsonl(metrics)] == [("train", 1), ("train", 2), ("resume", 2)]
    (record,) = read_metrics(metrics, kind="resume")
    assert record.checkpoint == str(checkpoint) and record.overrides == {"optimizer.lr": [5e-06, 1e-04]}
    assert json.loads((tmp_path / "run_status.json").read_text()) == {"status": "running", "step": 2}
    folder.close()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_run_from_step_0_has_no_checkpoint_to_restore_and_no_resume_record(tmp_path, stop):
    config = _config(tmp_path, resume="no")
    folder, _ = _folder(tmp_path)
    folder.claim(config.run.resume, config.run.overwrite)
    assert folder.find_resume(config, 40, 4, CPU) is None
    assert folder.identity == run_identity(config, 40, 4, 1)
    assert folder.restore(engine=None, exclude_frozen=False) == 0 and folder.changed_at(0) == {}
    folder.begin(0, config, 4, stop).close()
    assert read_metrics(tmp_path) == []
    folder.close()


def test_only_rank_0_writes_the_records_and_the_status(tmp_path, stop):
    config = _config(tmp_path, resume="no")
    folder = RunFolder(tmp_path, ParallelDims(world=2, rank=1, tp=1, dp=2, dp_rank=1), print)
    folder.claim(config.run.resume, config.run.overwrite)
    assert isinstance(folder.begin(0, config, 4, stop), SilentReporter)
    folder.finish(4, [{"index": 0}])
    folder.mark_failed(4)
    assert list(tmp_path.iterdir()) == [] and stop.status_dir is None


def test_the_end_of_a_run_writes_its_answers_and_status_and_a_failure_never_leaves_running(tmp_path, stop):
    folder, lines = _folder(tmp_path)
    folder.mark_failed(3)  # before the status says "running" there is nothing to correct
    assert not (tmp_path / "run_status.json").exists()
    folder.mark_running(3, stop)
    folder.mark_failed(3)
    assert json.loads((tmp_path / "run_status.json").read_text()) == {"status": "failed", "step": 3}
    folder.finish(4, [{"index": 0, "question": "1+1?"}])
    assert read_jsonl(tmp_path / "heldout_answers.jsonl") == [{"index": 0, "question": "1+1?"}]
    assert json.loads((tmp_path / "run_status.json").read_text()) == {"status": "finished", "step": 4}
    assert folder.final_model == tmp_path / "final"
    folder.finish(5, [])  # no greedy answers: no answers file is rewritten
    assert len(read_jsonl(tmp_path / "heldout_answers.jsonl")) == 1
