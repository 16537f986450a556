"""The device check's one command in its CPU ``--smoke`` mode (tiny shapes, ~2 minutes on 2 cores), so
that it is known to work before a GPU is lent: every section runs, has its headline figures as
finite numbers and no error, and both reports are written."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch

from helpers.shared import vocab_file
from helpers.training import REPO

SECTIONS = (
    "loss_overhead",
    "chunked_memory",
    "host_syncs",
    "train_smollm2",
    "qwen_1p5b_step",
    "compaction_step",
    "trainer_vs_hf",
)
# The figures of each section that a GPU run fills in (tests/gpu/README.md).
HEADLINES = {
    "loss_overhead": ("del_vs_mle_N256", "del_vs_ce_N512", "ce_ms_N256", "mle_ms_N512", "del_ms_N512"),
    "chunked_memory": ("7b_naive_del_gb", "7b_chunked_del_gb", "1p5b_chunked_mle_gb", "1p5b_del_memory_ratio"),
    "host_syncs": ("del_dense_fwd_bwd_syncs", "del_chunked_fwd_bwd_syncs", "trainer_step_syncs"),
    "train_smollm2": ("mle_tokens_per_s", "del_tokens_per_s", "del_vs_mle_tokens_per_s"),
    "qwen_1p5b_step": ("logits_step_ms", "chunked_step_ms", "logits_peak_gb", "chunked_vs_logits_memory"),
    "compaction_step": ("logits_prompt50_time_ratio", "chunked_prompt80_time_ratio", "logits_prompt80_memory_ratio"),
    "trainer_vs_hf": ("mle_x1_time_ratio", "mle_x1_memory_ratio", "mle_x1_trainer_step_s", "mle_x1_hf_step_s"),
}


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory) -> dict:
    vocab_file("qwen2")  # the real Qwen2 tokenizer; skips, naming `make vocab`, without it
    out = tmp_path_factory.mktemp("device_check")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DEVICE_CHECK_PYTHON": sys.executable}
    env.pop("OUT", None)
    proc = subprocess.run(
        ["bash", str(REPO / "tests" / "gpu" / "device_check.sh"), "--smoke", "--out", str(out), "--budget-s", "600"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = out / "device_check.json"
    assert report.is_file(), f"no report; exit {proc.returncode}\n{proc.stderr[-6000:]}"
    data = json.loads(report.read_text())
    data["_returncode"], data["_stderr"], data["_out"] = proc.returncode, proc.stderr, out
    return data


@pytest.mark.launches
def test_every_section_ran_without_error(smoke_report):
    sections = smoke_report["sections"]
    assert list(sections) == list(SECTIONS)
    failed = {name: entry.get("error") for name, entry in sections.items() if entry["status"] != "ok"}
    assert not failed, f"{failed}\n{smoke_report['_stderr'][-6000:]}"
    assert smoke_report["_returncode"] == 0
    assert smoke_report["mode"] == "smoke" and smoke_report["finished"] and smoke_report["wall_s"] > 0


@pytest.mark.launches
@pytest.mark.parametrize("name", SECTIONS)
def test_section_has_its_figures(smoke_report, name):
    entry = smoke_report["sections"][name]
    assert entry["wall_s"] > 0 and "traceback" not in entry
    headline = entry["headline"]
    for key in HEADLINES[name]:
        value = headline[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (key, value)
        assert math.isfinite(value) and value >= 0, (key, value)
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in headline.values()), headline


@pytest.mark.launches
def test_reports_are_written(smoke_report):
    env = smoke_report["environment"]
    assert env["torch"] and env["device"] == "cpu" and env["flash_attn"] in (True, False)
    markdown = (smoke_report["_out"] / "device_check.md").read_text()
    assert markdown.startswith("# Device check (smoke)")
    for name in SECTIONS:
        assert f"## {name}: ok" in markdown
    syncs = smoke_report["sections"]["host_syncs"]["results"]["calls"]["trainer_step"]
    assert syncs["total"] == sum(syncs["by_package"].values()) and syncs["top_origins"]
    runs = smoke_report["sections"]["train_smollm2"]["results"]["runs"]
    assert runs["mle"]["steps"] == runs["del"]["steps"] == 2
    profile = smoke_report["sections"]["trainer_vs_hf"]["results"]
    assert [(r["side"], r["loss"], r["nproc"]) for r in profile["runs"]] == [("trainer", "mle", 1), ("hf", "mle", 1)]
    assert "| mle | 1 |" in profile["table"] and profile["ds_config_differences"] == []


def _device_check_module():
    spec = importlib.util.spec_from_file_location("device_check", REPO / "tests" / "gpu" / "device_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_errors_and_the_budget_are_recorded_and_the_other_sections_run(tmp_path, monkeypatch):
    """A section that raises leaves its error and traceback; one the budget cannot hold is skipped;
    the rest run, and the report on disk holds every outcome."""
    dc = _device_check_module()

    def boom(ctx):
        raise ValueError("planted")

    sections = {
        "boom": (boom, dict),
        "fine": (lambda ctx: {"x": 1.5}, lambda results: {"x": results["x"]}),
        "too_long": (lambda ctx: {}, dict),
    }
    monkeypatch.setattr(dc, "SECTIONS", sections)
    monkeypatch.setattr(dc, "environment", lambda device: {"packages": {}})
    plan = dataclasses.replace(dc.Plan.smoke(), estimates_s={"boom": 0, "fine": 0, "too_long": 10_000})
    ctx = dc.Context(plan, torch.device("cpu"), tmp_path, tmp_path, time.monotonic() + 60)
    report = dc.Report.start(tmp_path, plan, ctx.device, list(sections), [], 60)
    dc.run_all(ctx, list(sections), report, time.monotonic())
    data = json.loads((tmp_path / "device_check.json").read_text())
    boom_entry, fine, skipped = (data["sections"][name] for name in sections)
    assert boom_entry["status"] == "error" and "ValueError: planted" in boom_entry["error"]
    assert "raise ValueError" in boom_entry["traceback"]
    assert fine["status"] == "ok" and fine["headline"] == {"x": 1.5}
    assert skipped["status"] == "skipped" and "estimate 10000 s" in skipped["skip_reason"]
    assert "## boom: error" in (tmp_path / "device_check.md").read_text()


@pytest.mark.launches
def test_an_unknown_section_is_refused(tmp_path):
    bad = subprocess.run(
        [sys.executable, str(REPO / "tests" / "gpu" / "device_check.py"), "--smoke", "--sections", "nope"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown section" in bad.stderr
