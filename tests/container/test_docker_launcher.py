"""launch/docker.sh's container command, as dry runs: the user the container runs as (the caller,
mapped per runtime; the image's user for root; RUN_AS), the CPU and sandbox options, the command
mode and the forwarded variables. The real runs: tests/container/test_image.py."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.shared import REPO

pytestmark = pytest.mark.launches
TINY = "recipes/configs/tiny.yaml"  # a recipe of the image
# launch/docker.sh's settings and the variables it forwards: unset unless a test sets them
CLEARED = ("RUNTIME", "RUN_AS", "GPUS", "SANDBOX_NAMESPACES", "FORWARD_ENV", "NETWORK", "DATA_DIR", "HF_TOKEN")
CLEARED += ("WANDB_API_KEY", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NPROC", "DEVICE", "OMP_NUM_THREADS")
CLEARED += ("DEL_SANDBOX_ACCEPT_BASIC",)


def _dry_run(args: list[str], user: str | None = None, **env: str) -> list[str]:
    """The container command launch/docker.sh ARGS would run (as ``user`` when given)."""
    environment = {k: v for k, v in os.environ.items() if k not in CLEARED}
    environment.update(DRY_RUN="1", IMAGE="del-train:test", RUNS_DIR="/r", HF_CACHE="/hf", DEL_CACHE="/dc", **env)
    command = ["bash", str(REPO / "launch" / "docker.sh"), *args]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, cwd=REPO, check=True)
    return shlex.split(done.stdout)


def _options(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == name]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root and runuser")
def test_a_non_root_caller_runs_the_container_as_itself():
    docker = _dry_run([TINY], user="nobody", RUNTIME="docker")
    assert _options(docker, "--user") == ["65534:65534"] and "--userns=keep-id" not in docker
    podman = _dry_run([TINY], user="nobody", RUNTIME="podman")  # rootless: keep-id, not a sub-uid
    assert "--userns=keep-id" in podman and _options(podman, "--user") == []


def test_root_runs_the_image_user_unless_run_as_names_one():
    for runtime in ("docker", "podman"):
        argv = _dry_run([TINY], RUNTIME=runtime)
        assert argv[:2] == [runtime, "run"] and _options(argv, "--user") == [] and "--userns=keep-id" not in argv
        assert _options(_dry_run([TINY], RUNTIME=runtime, RUN_AS="4242:4243"), "--user") == ["4242:4243"]


def test_cpu_and_sandbox_options_per_runtime():
    gpu = _dry_run([TINY], RUNTIME="docker")
    assert _options(gpu, "--gpus") == ["all"] and _options(gpu, "--ulimit") == ["memlock=-1", "stack=67108864"]
    cpu = _dry_run([TINY], RUNTIME="podman", GPUS="none", SANDBOX_NAMESPACES="1")
    assert _options(cpu, "--gpus") == [] and _options(cpu, "--ulimit") == []
    assert _options(cpu, "--security-opt") == ["unmask=/proc/*"] and "--ipc=host" in cpu
    docker = _dry_run([TINY], RUNTIME="docker", SANDBOX_NAMESPACES="1")
    assert _options(docker, "--security-opt") == ["systempaths=unconfined", "seccomp=unconfined", "apparmor=unconfined"]
    assert _options(_dry_run([TINY], RUNTIME="docker"), "--security-opt") == []


def test_a_command_after_the_separator_runs_as_given_with_the_forwarded_variables():
    argv = _dry_run(
        ["--", "python", "recipes/evaluate.py", "--sandbox", "basic"],
        RUNTIME="podman",
        DEL_SANDBOX_ACCEPT_BASIC="1",
        NPROC="2",
        FORWARD_ENV="MASTER_ADDR NNODES",
        MASTER_ADDR="node1",
    )
    assert argv[-5:] == ["del-train:test", "python", "recipes/evaluate.py", "--sandbox", "basic"]
    assert _options(argv, "-e") == ["NPROC", "DEL_SANDBOX_ACCEPT_BASIC", "MASTER_ADDR"]
    # ./data (the checkout's, which holds the benchmark sets) is DATA_DIR's default, read-only at /data.
    mounts = ["/r:/runs", "/hf:/cache/huggingface", "/dc:/cache/del_core", f"{REPO / 'data'}:/data:ro"]
    assert _options(argv, "-v") == mounts
    recipe = _dry_run(["recipes/configs/tiny.yaml", "run.max_steps=2"], RUNTIME="podman")
    assert recipe[-3:] == ["recipes/configs/tiny.yaml", "run.output_dir=/runs/tiny", "run.max_steps=2"]


def test_a_separator_without_a_command_is_an_error():
    done = subprocess.run(["bash", str(REPO / "launch" / "docker.sh"), "--"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == "error: no command after --\n"


def test_the_image_entry_and_the_launcher_are_shellcheck_clean():
    tool = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    scripts = [REPO / "docker" / "entrypoint.sh", REPO / "launch" / "docker.sh"]
    done = subprocess.run([tool, *map(str, scripts)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
