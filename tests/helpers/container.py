"""The CPU training image in the tests: built (or found by its content key) once per session with
docker/build_image.py, and podman and launch/docker.sh run against it with the project's
docker/containers.conf."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.scripts import script_module
from helpers.shared import REPO

BUILD_SCRIPT = REPO / "docker" / "build_image.py"
CONTAINERS_CONF = REPO / "docker" / "containers.conf"
# The host user the container tests run the image as: a non-root id without an account, standing
# for the non-root caller that launch/docker.sh maps by default (the tests run as root).
HOST_UID = HOST_GID = 4242


def build_module():
    """docker/build_image.py as a module (it is a script, not part of the package)."""
    return script_module(BUILD_SCRIPT, "build_image")


def podman_unavailable() -> str | None:
    """Why the image cannot be built and run here, or None."""
    if os.geteuid() != 0:
        return "the image build needs root (debootstrap, rootful podman)"
    missing = [tool for tool in ("podman", "debootstrap") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (`make system-deps` installs them, as root)"
    build = build_module()
    try:
        build.torch_wheels(build.default_wheels(), REPO / "requirements.txt")
    except build.BuildError as err:
        return str(err)
    return None


def podman_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF), **extra}


def podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``podman ARGS`` with the project's containers.conf, output captured."""
    return subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    stdout: str  # the build script's report (cache hits, times, size)
    seconds: float


# The build started by start_background_build (at most one per session).
_background: subprocess.Popen | None = None


def start_background_build(log: Path) -> None:
    """Start docker/build_image.py now, niced, its output to ``log``, so that a session whose
    container tests run last has its image built (~3 min cold: downloads and unpacking) while the
    other tests run. build_image() waits for it; when it failed, build_image()'s own run reports."""
    global _background
    if _background is None and podman_unavailable() is None:
        with open(log, "w") as output:
            command = ["nice", "-n", "10", sys.executable, str(BUILD_SCRIPT)]
            _background = subprocess.Popen(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)


# The outside user's run (helpers/outside_user.py) started by start_outside_user_run, and its folder.
_outside_user: tuple[subprocess.Popen, Path] | None = None


def start_outside_user_run(out: Path) -> None:
    """Start helpers/outside_user.py OUT, niced, once the background image build (which makes the
    Debian base it uses) has ended: a shell waits for it, so the suite goes on meanwhile."""
    global _outside_user
    script = REPO / "tests" / "helpers" / "outside_user.py"
    # the build has ended when its process is gone or a zombie (pytest reaps it only later)
    wait = f"while ps -o stat= -p {_background.pid} | grep -q '^[^Z]'; do sleep 2; done; " if _background else ""
    command = f'{wait}exec nice -n 10 "{sys.executable}" "{script}" "{out}"'
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "run.log", "w") as output:
        process = subprocess.Popen(["bash", "-c", command], cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    _outside_user = (process, out)


def wait_for_outside_user_run(timeout: float = 3600) -> tuple[Path, list[dict]]:
    """The outside user's run (started in the background, else run now): its folder and its steps."""
    from helpers.outside_user import read_steps, run

    if _outside_user is None:
        out = Path(tempfile.mkdtemp(prefix="del-outside-user-"))
        run(out)
        return out, read_steps(out)
    process, out = _outside_user
    process.wait(timeout=timeout)
    return out, read_steps(out)


def build_image(timeout: float = 1200) -> BuiltImage:
    """Run docker/build_image.py (a cache hit when nothing changed, e.g. after the background build);
    raises with its output on failure."""
    started = time.monotonic()
    if _background is not None:
        _background.wait(timeout=timeout)
    done = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise AssertionError(f"docker/build_image.py exited {done.returncode}\n{done.stdout}\n{done.stderr[-6000:]}")
    return BuiltImage(done.stdout.strip().splitlines()[-1], done.stdout, time.monotonic() - started)


@dataclass(frozen=True)
class HostFolders:
    """The folders launch/docker.sh mounts, owned by the host user HOST_UID."""

    runs: Path
    del_cache: Path  # converted models and tokenizers, and DeepSpeed's compiled ops: once per session
    hf_cache: Path

    def env(self, image: str, **extra: str) -> dict[str, str]:
        """launch/docker.sh's environment: podman, CPU, offline, as the host user, these folders."""
        settings = {
            "RUNTIME": "podman",
            "IMAGE": image,
            "GPUS": "none",
            "NETWORK": "none",
            "RUN_AS": f"{HOST_UID}:{HOST_GID}",
            "RUNS_DIR": str(self.runs),
            "DEL_CACHE": str(self.del_cache),
            "HF_CACHE": str(self.hf_cache),
            "DATA_DIR": str(self.runs / "no-data"),
        }
        return podman_env(**{**settings, **extra})


def host_folders(root: Path) -> HostFolders:
    folders = HostFolders(root / "runs", root / "del_cache", root / "hf_cache")
    for path in (root, folders.runs, folders.del_cache, folders.hf_cache):
        path.mkdir(exist_ok=True)
        os.chown(path, HOST_UID, HOST_GID)
    return folders


def docker_launcher(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``launch/docker.sh ARGS`` with ``env``, output captured."""
    command = ["bash", str(REPO / "launch" / "docker.sh"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
