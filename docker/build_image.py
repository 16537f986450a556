#!/usr/bin/env python3
"""Build the CPU variant of docker/Dockerfile with podman, from a Debian base made here with
debootstrap: no Docker daemon, no registry (docs/docker.md).

    python3 docker/build_image.py [--wheels DIR] [--storage DIR] [--name NAME]
    python3 docker/build_image.py --package-version   # del_core.__version__: the label's DEL_VERSION

Two content-addressed steps; each is skipped ("cache hit") when podman's storage already holds an
image tagged with its key:

  base   ``debootstrap --variant=minbase bookworm`` plus this machine's extra CA certificates
         (/usr/local/share/ca-certificates: pip inside the build may go through TLS interception)
         and an /etc/pip.conf that trusts the system bundle; key: a hash of exactly these inputs.
  image  ``podman build`` of docker/Dockerfile with the CPU build arguments on that base, the folder
         holding the pinned torch wheel mounted at /wheels; key: a hash of the base key, the
         Dockerfile, the build arguments, every file the Dockerfile COPYs (.dockerignore applied)
         and the torch wheel. On a miss, podman's layer cache still reuses every unchanged layer.

Prints each step's time, the image size and, on the last line, the image's tag (also tagged
NAME:cpu). Runs as root with podman and debootstrap installed (`make system-deps`); podman reads
docker/containers.conf (CONTAINERS_CONF) unless CONTAINERS_CONF is set.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "Dockerfile"
CONTAINERS_CONF = REPO / "docker" / "containers.conf"
CA_DIR = Path("/usr/local/share/ca-certificates")
PIP_CONF = "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"
WHEELS_INSIDE = "/wheels"
# The CPU variant (docker/Dockerfile's build arguments; the defaults build the CUDA image).
# TORCH_SOURCE: the torch wheel folder, mounted at WHEELS_INSIDE/<its digest> (ImageRecipe).
CPU_BUILD_ARGS = (
    ("PYTHON_SOURCE", "system"),
    ("DS_BUILD_FUSED_ADAM", "0"),
    ("DS_BUILD_CPU_ADAM", "0"),
    ("SYSTEM_PACKAGES", "g++"),
    ("ACCELERATOR", "cpu"),
)
KEY_CHARS = 16
PACKAGE_INIT = Path("del_core") / "__init__.py"
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)


class BuildError(RuntimeError):
    """A missing tool or input, or a failed step; the message is one line."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class BaseRecipe:
    """The debootstrap inputs of the base image; ``key`` changes exactly when one of them does."""

    suite: str = "bookworm"
    variant: str = "minbase"
    mirror: str = "http://deb.debian.org/debian"
    packages: tuple = ("ca-certificates",)
    ca_files: tuple = field(default_factory=lambda: tuple(sorted(CA_DIR.glob("*.crt"))))

    def site_files(self) -> dict[str, bytes]:
        """Files written into the debootstrapped tree, by their path inside it."""
        files = {f"/usr/local/share/ca-certificates/{p.name}": p.read_bytes() for p in self.ca_files}
        files["/etc/pip.conf"] = PIP_CONF.encode()
        return files

    def key(self) -> str:
        inputs = {
            "suite": self.suite,
            "variant": self.variant,
            "mirror": self.mirror,
            "packages": list(self.packages),
            "files": {path: _sha256(data) for path, data in self.site_files().items()},
        }
        return _sha256(json.dumps(inputs, sort_keys=True).encode())[:KEY_CHARS]


def dockerignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line.rstrip("/") for line in lines if line and not line.startswith("#")]


def is_ignored(relative: str, patterns: list[str]) -> bool:
    """Whether .dockerignore ``patterns`` leave ``relative`` (a path under the context) out: a
    pattern matches the path or one of its parent folders; ``**/`` matches any depth."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts):
                return True
        elif any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            return True
    return False


def copy_sources(dockerfile_text: str) -> list[str]:
    """The context paths the Dockerfile's COPY/ADD instructions read (not ``--from`` stages)."""
    text = re.sub(r"\\\n", " ", dockerfile_text)
    sources = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0].upper() not in ("COPY", "ADD"):
            continue
        if any(w.startswith("--from") for w in words[1:]):
            continue
        sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def context_files(context: Path, sources: list[str], patterns: list[str]) -> list[str]:
    """Every file the COPY ``sources`` bring into the image, relative to ``context``, sorted."""
    found = set()
    for source in sources:
        root = context / source
        if not root.exists():
            raise BuildError(f"the Dockerfile copies {source}, which is not in {context}")
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in paths:
            relative = path.relative_to(context).as_posix()
            if not is_ignored(relative, patterns):
                found.add(relative)
    return sorted(found)


def torch_wheels(folder: Path, requirements: Path) -> list[Path]:
    """The wheels in ``folder`` of the torch pinned in ``requirements`` (``torch==X``)."""
    pins = re.findall(r"^torch==(\S+)", requirements.read_text(), flags=re.M)
    if not pins:
        raise BuildError(f"{requirements} pins no torch (torch==X)")
    wheels = sorted([*folder.glob(f"torch-{pins[0]}-*.whl"), *folder.glob(f"torch-{pins[0]}+*.whl")])
    if not wheels:
        fetch = f"pip download torch=={pins[0]} --no-deps -d DIR"
        raise BuildError(f"no torch-{pins[0]} wheel in {folder}: pass --wheels DIR (`{fetch}`)")
    return wheels


def package_version(context: Path) -> str:
    """``del_core.__version__`` as written in the context's ``del_core/__init__.py`` (read, not
    imported: this script runs without the package's dependencies)."""
    path = context / PACKAGE_INIT
    found = VERSION_LINE.search(path.read_text()) if path.is_file() else None
    if found is None:
        raise BuildError(f'{path}: no line __version__ = "X.Y.Z"')
    return found.group(1)


@dataclass(frozen=True)
class ImageRecipe:
    """What enters the image build; ``key`` changes exactly when one of these inputs does."""

    context: Path
    dockerfile: Path
    base_tag: str
    wheels: Path  # the folder holding the pinned torch wheel

    @cached_property
    def wheels_inside(self) -> str:
        """Where the wheel folder is mounted in the build: a path naming the wheels' content, so
        that another wheel changes TORCH_SOURCE and with it podman's cache key of the torch layer."""
        digests = [file_digest(wheel) for wheel in torch_wheels(self.wheels, self.context / "requirements.txt")]
        return f"{WHEELS_INSIDE}/{_sha256(' '.join(digests).encode())[:KEY_CHARS]}"

    def build_args(self) -> tuple:
        return (
            ("BASE_IMAGE", self.base_tag),
            *CPU_BUILD_ARGS,
            ("TORCH_SOURCE", self.wheels_inside),
            ("DEL_VERSION", package_version(self.context)),
        )

    def inputs(self) -> dict[str, str]:
        """Digest of the Dockerfile and of every file it copies, by context-relative name."""
        text = self.dockerfile.read_text()
        digests = {"Dockerfile": _sha256(text.encode())}
        for relative in context_files(self.context, copy_sources(text), dockerignore_patterns(self.context)):
            digests[relative] = file_digest(self.context / relative)
        return digests

    def key(self) -> str:
        inputs = {"build_args": [list(arg) for arg in self.build_args()], "files": self.inputs()}
        return _sha256(json.dumps(inputs, sort_keys=True).encode())[:KEY_CHARS]


@dataclass(frozen=True)
class Podman:
    """podman with this project's containers.conf and, optionally, its own storage folder."""

    storage: Path | None = None

    def command(self, *args: str) -> list[str]:
        where = [] if self.storage is None else ["--root", f"{self.storage}/root", "--runroot", f"{self.storage}/run"]
        return ["podman", *where, *args]

    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF))}

    def run(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), env=self.env(), text=True, **kwargs)

    def has_image(self, tag: str) -> bool:
        return self.run("image", "exists", tag).returncode == 0

    def size_bytes(self, tag: str) -> int:
        done = self.run("image", "inspect", "--format", "{{.Size}}", tag, capture_output=True, check=True)
        return int(done.stdout.strip())


def _step(command: list[str], what: str, **kwargs) -> None:
    """Run ``command``; :class:`BuildError` naming ``what`` when it fails."""
    if subprocess.run(command, **kwargs).returncode != 0:
        raise BuildError(f"{what} failed: {' '.join(command[:4])} ...")


def make_base(recipe: BaseRecipe, podman: Podman, tag: str) -> None:
    """debootstrap the base into a temporary folder, add its site files, import it as ``tag``."""
    root = Path(tempfile.mkdtemp(prefix="del-base-"))
    try:
        command = ["debootstrap", f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}"]
        _step([*command, recipe.suite, str(root), recipe.mirror], "debootstrap", stdout=sys.stderr)
        for path, data in recipe.site_files().items():
            (root / path.lstrip("/")).write_bytes(data)
        _step(["chroot", str(root), "update-ca-certificates"], "update-ca-certificates", stdout=sys.stderr)
        for leftover in [*(root / "var/cache/apt/archives").glob("*.deb"), *(root / "var/lib/apt/lists").glob("*_*")]:
            leftover.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            podman.command("import", "-", tag), stdin=tar.stdout, env=podman.env(), stdout=sys.stderr
        )
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise BuildError(f"importing the base into podman as {tag} failed")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build_image(recipe: ImageRecipe, podman: Podman, tags: list[str]) -> None:
    args = ["build", "--layers", "-f", str(recipe.dockerfile), "--volume", f"{recipe.wheels}:{recipe.wheels_inside}:ro"]
    for name, value in recipe.build_args():
        args += ["--build-arg", f"{name}={value}"]
    for tag in tags:
        args += ["--tag", tag]
    _step(podman.command(*args, str(recipe.context)), "podman build", env=podman.env(), stdout=sys.stderr)


def _cached(what: str, tag: str, present: bool, make) -> float:
    """Run ``make()`` unless ``present``; print the outcome; its seconds."""
    if present:
        print(f"[{what}] {tag}: cache hit (inputs unchanged)", flush=True)
        return 0.0
    started = time.monotonic()
    make()
    seconds = time.monotonic() - started
    print(f"[{what}] {tag}: built in {seconds:.1f} s", flush=True)
    return seconds


def default_wheels() -> Path:
    """The first folder of ``PIP_FIND_LINKS`` (where pip finds the local torch wheel here), else
    the current folder."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    return Path(links[0]) if links else Path.cwd()


def check_tools() -> None:
    if os.geteuid() != 0:
        raise BuildError("building the base needs root (debootstrap, chroot, rootful podman)")
    missing = [tool for tool in ("podman", "debootstrap", "tar") if shutil.which(tool) is None]
    if missing:
        raise BuildError(f"{', '.join(missing)} not installed: `make system-deps` installs them, as root")


def base_image(podman: Podman) -> str:
    """Make (or find) the Debian base; its tag."""
    base = BaseRecipe()
    tag = f"localhost/del-base:{base.key()}"
    _cached("base", tag, podman.has_image(tag), lambda: make_base(base, podman, tag))
    return tag


def build(wheels: Path, podman: Podman, name: str) -> str:
    """Make (or find) the base and the image; print times and size; the image's tag."""
    started = time.monotonic()
    base_tag = base_image(podman)
    recipe = ImageRecipe(REPO, DOCKERFILE, base_tag, wheels)
    tag = f"{name}:cpu-{recipe.key()}"
    _cached("image", tag, podman.has_image(tag), lambda: build_image(recipe, podman, [tag]))
    podman.run("tag", tag, f"{name}:cpu", check=True)
    size = podman.size_bytes(tag)
    print(f"[image] {size / 1e9:.2f} GB; build time {time.monotonic() - started:.1f} s (base and image)", flush=True)
    return tag


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", type=Path, default=None, help="folder with the pinned torch wheel")
    parser.add_argument("--storage", type=Path, default=None, help="podman storage folder (default: podman's)")
    parser.add_argument("--name", default="localhost/del-train", help="image name (tags: cpu-KEY and cpu)")
    parser.add_argument("--package-version", action="store_true", help="print del_core.__version__ and exit")
    options = parser.parse_args(argv)
    try:
        if options.package_version:
            print(package_version(REPO))
            return 0
        check_tools()
        tag = build((options.wheels or default_wheels()).resolve(), Podman(options.storage), options.name)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
