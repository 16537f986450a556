"""launch/ and docker/: the scripts lint clean, print the right per-node commands (the slurm dry run
with the real ``scontrol``), and really launch (the single-node launcher on CPU, a stop signal that
checkpoints). Slurm jobs on a real cluster: test_slurm.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.shared import real_tokenizer
from helpers.training import REPO, make_tiny_qwen2, records

SCRIPTS = [
    REPO / "launch" / "train.sh",
    REPO / "launch" / "docker.sh",
    REPO / "launch" / "slurm" / "train.sbatch",
    REPO / "launch" / "slurm" / "node.sh",
    REPO / "launch" / "slurm" / "container.sh",
]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if path is None:
        pytest.skip(f"{name} is not installed (requirements-test.txt)")
    return path


@pytest.mark.launches
def test_shell_scripts_are_shellcheck_clean():
    proc = subprocess.run([_tool("shellcheck"), *map(str, SCRIPTS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.launches
def test_dockerfile_is_hadolint_clean():
    proc = subprocess.run(
        [_tool("hadolint"), "--config", str(REPO / ".hadolint.yaml"), str(REPO / "docker" / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_installs_the_pinned_stack():
    text = (REPO / "docker" / "Dockerfile").read_text()
    default_base = "ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04\nFROM ${BASE_IMAGE}\n"
    assert text.startswith("# syntax") and default_base in text
    assert "grep '^torch==' requirements.txt" in text and "grep '^deepspeed==' requirements.txt" in text
    assert 'TORCH_CUDA_ARCH_LIST="8.0;9.0"' in text and "DS_BUILD_FUSED_ADAM=1" in text
    assert "\nUSER ${USER_UID}\n" in text
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def _slurm_env(slurm_config: Path, nodes: int, nodelist: str, **extra) -> dict:
    """A dry run's environment: the real ``scontrol`` (Debian's slurm-client) expands the node
    list with the test cluster's slurm.conf; no daemon is needed."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol is not installed: `make system-deps` installs it, as root")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        SLURM_CONF=str(slurm_config),
        SLURM_JOB_NODELIST=nodelist,
        SLURM_JOB_NUM_NODES=str(nodes),
        SLURM_JOB_ID="4242",
        SLURM_JOB_NAME="del-test",
        PYTHON=sys.executable,
        **extra,
    )
    return env


@pytest.mark.launches
@pytest.mark.parametrize("nodes, nodelist", [(1, "gpu07"), (2, "gpu[01-02]"), (16, "gpu[01-16]")])
def test_slurm_dry_run_prints_every_node_command(slurm_config, nodes, nodelist):
    env = _slurm_env(slurm_config, nodes, nodelist, DRY_RUN="1", GPUS_PER_NODE="8")
    proc = subprocess.run(
        ["bash", str(REPO / "launch" / "slurm" / "train.sbatch"), "recipes/configs/qwen2.5-7b.yaml", "loss=mle"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == nodes
    for rank, line in enumerate(lines):
        host = f"gpu{rank + 1:02d}" if nodes > 1 else "gpu07"
        prefix = f"node {rank} ({host}): "
        assert line.startswith(prefix)
        argv = shlex.split(line[len(prefix) :])
        assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
        opts = dict(zip(argv[3:15:2], argv[4:15:2]))
        assert opts == {
            "--nnodes": str(nodes),
            "--node_rank": str(rank),
            "--nproc_per_node": "8",
            "--master_addr": "gpu01" if nodes > 1 else "gpu07",
            "--master_port": str(20000 + 4242),
            "--signals-to-handle": "SIGINT,SIGHUP,SIGQUIT",  # not SIGTERM: the trainer stops on it
        }
        assert argv[15:] == [
            str(REPO / "recipes" / "train.py"),
            "recipes/configs/qwen2.5-7b.yaml",
            "loss=mle",
            "run.resume=auto",
            "run.output_dir=runs/del-test",
        ]


@pytest.mark.launches
def test_slurm_dry_run_user_keys_win_and_bad_nodelist_is_named(slurm_config):
    env = _slurm_env(slurm_config, 2, "gpu[01-02]", DRY_RUN="1")
    proc = subprocess.run(
        ["bash", str(REPO / "launch" / "slurm" / "train.sbatch"), "r.yaml", "resume=no"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.splitlines()[0].endswith("run.resume=auto run.output_dir=runs/del-test resume=no ")
    env = _slurm_env(slurm_config, 3, "gpu[01-02]", DRY_RUN="1")
    proc = subprocess.run(
        ["bash", str(REPO / "launch" / "slurm" / "train.sbatch"), "r.yaml"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "expands to 2 hosts, but the job has 3 nodes" in proc.stderr


@pytest.mark.launches
def test_slurm_dry_run_inside_the_image_per_runtime(slurm_config, tmp_path):
    """DEL_CONTAINER_IMAGE: with podman each node runs the image's node.sh through launch/docker.sh
    (host network, the submit, output and named folders at their own path, the node's variables
    forwarded); with pyxis srun gets the container options and the node command is the image's; any
    other runtime, or pyxis where srun lacks it, is refused naming the key."""
    sbatch = ["bash", str(REPO / "launch" / "slurm" / "train.sbatch"), "r.yaml"]
    image = {"DEL_CONTAINER_IMAGE": "del-train:test", "OUTPUT_DIR": "out", "DEL_CONTAINER_MOUNTS": "/models/m"}
    env = _slurm_env(slurm_config, 2, "gpu[01-02]", DRY_RUN="1", GPUS_PER_NODE="0", **image)
    podman = subprocess.run(sbatch, env={**env, "DEL_CONTAINER_RUNTIME": "podman"}, cwd=tmp_path, **_TEXT, check=True)
    for rank, line in enumerate(podman.stdout.splitlines()):
        argv = shlex.split(line.split(": ", 1)[1])
        assert argv[:6] == ["podman", "run", "--rm", "--init", "--ipc=host", "--network=host"] and "--gpus" not in argv
        mounts = [argv[i + 1] for i, word in enumerate(argv) if word == "-v"]
        for folder in (tmp_path, tmp_path / "out", tmp_path / "out" / "logs", "/models/m"):
            assert f"{folder}:{folder}" in mounts, (rank, mounts)
        assert argv[argv.index("--workdir") + 1] == str(tmp_path)
        forwarded = {argv[i + 1] for i, word in enumerate(argv) if word == "-e"}
        assert {"SLURM_NODEID", "NNODES", "MASTER_ADDR", "MASTER_PORT", "DEL_REPO", "LOG_DIR"} <= forwarded
        assert "PYTHON" not in forwarded  # the host's interpreter: the image's own is used
        assert argv[-5:] == [
            "del-train:test",
            "/opt/del/launch/slurm/node.sh",
            "r.yaml",
            "run.resume=auto",
            "run.output_dir=out",
        ]
    pyxis = subprocess.run(sbatch, env={**env, "DEL_CONTAINER_RUNTIME": "pyxis"}, cwd=tmp_path, **_TEXT, check=True)
    first, *nodes = pyxis.stdout.splitlines()
    mounts = ",".join(f"{f}:{f}" for f in (tmp_path, tmp_path / "out", tmp_path / "out" / "logs", "/models/m"))
    assert first.startswith(f"srun --container-image=del-train:test --container-mounts={mounts},")
    assert first.endswith(f" --container-workdir={tmp_path}") and len(nodes) == 2
    assert all(
        " /opt/venv/bin/python -m torch.distributed.run " in n and " /opt/del/recipes/train.py " in n for n in nodes
    )
    pyxis_srun = tmp_path / "bin" / "srun"  # what pyxis adds to srun --help; auto then chooses pyxis
    pyxis_srun.parent.mkdir()
    pyxis_srun.write_text("#!/bin/sh\necho '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n")
    pyxis_srun.chmod(0o755)
    auto = subprocess.run(sbatch, env={**env, "PATH": f"{pyxis_srun.parent}:{env['PATH']}"}, cwd=tmp_path, **_TEXT)
    assert auto.stdout == pyxis.stdout, auto.stderr
    bad = subprocess.run(sbatch, env={**env, "DEL_CONTAINER_RUNTIME": "docker"}, cwd=tmp_path, **_TEXT)
    assert bad.returncode == 2 and bad.stderr == "error: DEL_CONTAINER_RUNTIME=docker: use pyxis, podman or auto\n"
    del env["DRY_RUN"]  # a real start: pyxis is checked for before anything runs
    missing = subprocess.run(sbatch, env={**env, "DEL_CONTAINER_RUNTIME": "pyxis"}, cwd=tmp_path, **_TEXT)
    assert (
        missing.returncode == 2
        and "DEL_CONTAINER_RUNTIME=pyxis, but this srun has no --container-image" in missing.stderr
    )
    assert not (tmp_path / "out").exists()


_TEXT = {"capture_output": True, "text": True}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))


def _overrides(tiny_model: Path, tmp_path: Path, **extra) -> list[str]:
    values = {
        "model": tiny_model,
        "data": "synthetic:16",
        "data.eval_size": 0,
        "data.max_length": 96,
        "run.global_batch_size": 4,
        "run.micro_batch_size": 1,
        "run.max_steps": 2,
        "optimizer.lr": 1e-3,
        "run.report_to": "jsonl",
        "model.gradient_checkpointing": "false",
        "run.export": "false",
        "parallel.zero_stage": 3,
        "model.cache_dir": tmp_path / "cache",
    }
    values.update({f"run.{k}" if k in ("output_dir", "max_steps") else k: v for k, v in extra.items()})
    return [f"{k}={v}" for k, v in values.items()]


@pytest.mark.launches
def test_single_node_launcher_on_cpu(tiny_model, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "DEVICE": "cpu", "NPROC": "2", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    dry = subprocess.run(
        ["bash", str(REPO / "launch" / "train.sh"), "r.yaml", "loss=mle"],
        env={**env, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shlex.split(dry.stdout) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(REPO / "recipes" / "train.py"),
        "r.yaml",
        "loss=mle",
    ]
    proc = subprocess.run(
        ["bash", str(REPO / "launch" / "train.sh"), *_overrides(tiny_model, tmp_path, output_dir=out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "[run] 2 rank(s) on CPU" in proc.stdout and [r["step"] for r in records(out)] == [1, 2]


@pytest.mark.launches
def test_docker_launcher_dry_run(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("loss: del\n")
    (tmp_path / "data").mkdir()
    env = {
        **os.environ,
        "DRY_RUN": "1",
        "RUNTIME": "docker",
        "IMAGE": "del-train:test",
        "RUNS_DIR": "/scratch/runs",
        "DATA_DIR": str(tmp_path / "data"),
        "HF_CACHE": "/hf",
        "DEL_CACHE": "/dc",
        "NPROC": "4",
    }
    proc = subprocess.run(
        ["bash", str(REPO / "launch" / "docker.sh"), str(recipe), "optimizer.lr=1e-5"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    argv = shlex.split(proc.stdout)
    assert argv[:3] == ["docker", "run", "--rm"] and "--ipc=host" in argv
    assert argv[argv.index("--gpus") + 1] == "all"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    assert mounts == [
        "/scratch/runs:/runs",
        "/hf:/cache/huggingface",
        "/dc:/cache/del_core",
        f"{tmp_path / 'data'}:/data:ro",
        f"{tmp_path}:/recipe:ro",
    ]
    assert argv[-4:] == ["del-train:test", "/recipe/mine.yaml", "run.output_dir=/runs/mine", "optimizer.lr=1e-5"]
    assert argv[argv.index("-e") + 1] == "NPROC"


@pytest.mark.launches
def test_stop_signal_checkpoints_and_marks_the_run_stopped(tiny_model, tmp_path):
    """USR1 (what launch/slurm forwards before the time limit): the step finishes, a complete
    checkpoint is written, run_status.json says stopped, the process exits 0."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "recipes" / "train.py"),
            *_overrides(tiny_model, tmp_path, output_dir=out, max_steps=500, data="synthetic:64"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (metrics.exists() and records(out)):
        assert proc.poll() is None, proc.stdout.read()[-4000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGUSR1)
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, output[-4000:]
    status = json.loads((out / "run_status.json").read_text())
    assert status["status"] == "stopped" and 1 <= status["step"] < 500
    assert (out / "checkpoints" / f"step_{status['step']:06d}" / "COMPLETE.json").is_file()
    assert [r["step"] for r in records(out)] == list(range(1, status["step"] + 1))
