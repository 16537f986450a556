"""An outside user's first run: in a clean container made from the Debian base of the image build
(docker/build_image.py), a fresh ``git clone`` of this checkout's commit, and nothing from this
machine but the torch wheel (mounted read-only as a find-links folder), run the README's commands
as written: ``make install``, ``make test-fast``, ``make train``.

    python3 tests/helpers/outside_user.py OUT_DIR

Writes into OUT_DIR: ``<step>.log`` for each step (apt, clone, install, test-fast, train) and
``steps.jsonl`` (one row per step: name, exit status, seconds), then exits 0 when every step
passed. Root, podman and debootstrap (``make system-deps``); the container reaches Debian's mirror
and the package index through this machine's network and CA certificates (the base's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docker"))

import build_image  # noqa: E402  (docker/build_image.py: a script beside the package)

# The commands of the README's Set-up, in the order an outside user runs them.
README_STEPS = (("install", "make install"), ("test-fast", "make test-fast"), ("train", "make train"))
SYSTEM_PACKAGES = ("python3-venv", "python3-dev", "g++", "make", "git")
WHEELS_INSIDE = "/wheels"

# Runs inside the container as root: each step's output to /out/<step>.log and a row to
# /out/steps.jsonl; the first failing step ends the run.
INSIDE = r"""
set -uo pipefail
step() {
    local name=$1; shift
    local started=$SECONDS
    "$@" > "/out/$name.log" 2>&1
    local status=$?
    printf '{"name": "%s", "status": %d, "seconds": %d}\n' "$name" "$status" $((SECONDS - started)) >> /out/steps.jsonl
    [[ $status == 0 ]] || exit "$status"
}
export DEBIAN_FRONTEND=noninteractive PIP_FIND_LINKS=WHEELS PIP_DISABLE_PIP_VERSION_CHECK=1 PYTEST_ADDOPTS=-rs
step apt bash -c "apt-get update -q && apt-get install -y -q --no-install-recommends PACKAGES"
step clone git clone /src /home/user/del
cd /home/user/del
STEPS
"""


def inside_script() -> str:
    steps = "\n".join(f"step {name} {command}" for name, command in README_STEPS)
    return (
        INSIDE.replace("WHEELS", WHEELS_INSIDE).replace("PACKAGES", " ".join(SYSTEM_PACKAGES)).replace("STEPS", steps)
    )


def clone_of_this_checkout(target: Path) -> Path:
    """A fresh clone of HEAD (what is committed; the working tree's edits are not an outside
    user's), the container's ``/src``."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(target)], check=True)
    subprocess.run(["git", "-C", str(target), "checkout", "-q", "--detach", head.stdout.strip()], check=True)
    return target


def run(out: Path) -> int:
    """The whole run; the exit status of its container (0: every step passed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps.jsonl").write_text("")
    podman = build_image.Podman()
    base = build_image.base_image(podman)
    (wheel,) = build_image.torch_wheels(build_image.default_wheels(), REPO / "requirements.txt")
    work = Path(tempfile.mkdtemp(prefix="del-outside-user-"))
    try:
        source = clone_of_this_checkout(work / "src")
        command = podman.command(
            "run", "--rm", "--network", "host",
            "--volume", f"{source}:/src:ro",
            "--volume", f"{wheel.resolve()}:{WHEELS_INSIDE}/{wheel.name}:ro",
            "--volume", f"{out}:/out",
            base, "bash", "-c", inside_script(),
        )  # fmt: skip
        return subprocess.run(command, env=podman.env()).returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


if __name__ == "__main__":
    status = run(Path(sys.argv[1]).resolve())
    for row in read_steps(Path(sys.argv[1])):
        print(f"{row['name']:10s} exit {row['status']}  {row['seconds']} s", flush=True)
    sys.exit(status)
