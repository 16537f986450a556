"""Running generated programs in a separate, limited process.

:func:`run_program` writes the program into a fresh temporary directory and runs it with the same
Python in isolated mode (``python -I -B del_core/evaluation/sandbox_child.py``, whose docstring
lists the limits and guards set inside the child) with cwd, HOME and TMPDIR set to that directory,
a minimal environment, stdin from /dev/null, and stdout/stderr into files kept outside it (their
size is capped by RLIMIT_FSIZE = ``output_bytes``). The child starts a new session; on return, and
at once when the wall-clock limit passes, the whole process group is killed with SIGKILL, so the
harness neither hangs nor leaves processes behind. Both directories are deleted afterwards.

What is enforced by the kernel: CPU time, address space, file size, open files, no core dumps; a
new empty network namespace where the kernel allows unshare (root, or unprivileged user
namespaces); when the harness runs as root, the program runs as ``user`` (default ``nobody``), so
it can neither signal the harness nor write where that user cannot, and RLIMIT_NPROC = 0 forbids
any new process or thread. What is Python-level only (an audit hook, best effort, not a security
boundary against deliberate escapes through native code): refusing fork/exec/spawn/subprocess,
kill, sockets, native calls through ctypes, and file writes outside the working directory. Not
isolated: reading files the user may read, and the wall-clock share of a CPU (the CPU limit covers busy loops).

Statuses: ok, error (non-zero exit or exception), timeout (wall clock or CPU limit), memory_limit
(MemoryError), output_limit (stdout/stderr/file size cap), blocked (a refused operation).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

CHILD = Path(__file__).resolve().with_name("sandbox_child.py")
LAYERS_MARK = "SANDBOX-LAYERS "
VIOLATION_MARK = "SANDBOX-VIOLATION"


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_bytes: int = 2 << 30  # RLIMIT_AS: 2 GiB of address space
    output_bytes: int = 1 << 20  # RLIMIT_FSIZE: stdout, stderr and any file written, 1 MiB each
    open_files: int = 64
    user: Optional[str] = "nobody"  # run as this user when the harness is root (None: stay root)


@dataclass
class SandboxResult:
    status: str
    stdout: str
    stderr: str
    returncode: Optional[int]
    wall_seconds: float
    layers: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        return asdict(self)


def _read(path: Path, limit: int) -> str:
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _status(timed_out: bool, returncode: int, stderr: str, at_size_cap: bool) -> str:
    if timed_out or returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if returncode == -signal.SIGXFSZ or at_size_cap:  # Python ignores SIGXFSZ: writes fail with EFBIG
        return "output_limit"
    if VIOLATION_MARK in stderr:
        return "blocked"
    if "MemoryError" in stderr:
        return "memory_limit"
    return "ok" if returncode == 0 else "error"


def _owner_for(user: Optional[str]):
    if os.geteuid() != 0 or not user:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _child_environment(workdir: Path) -> dict[str, str]:
    """A minimal environment: nothing of the harness's leaks in; one thread per numeric library."""
    return {
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _run_child(workdir: Path, private: Path, config: dict, wall_seconds: float) -> tuple[int, bool]:
    """(return code, timed out) of the child running WORKDIR/program.py, its output in PRIVATE."""
    with open(private / "stdout", "wb") as out, open(private / "stderr", "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-I", "-B", str(CHILD), json.dumps(config), str(workdir / "program.py")],
            cwd=workdir,
            env=_child_environment(workdir),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
        timed_out = False
        try:
            process.wait(timeout=wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(process.pid)  # the program's leftovers too, if any escaped the guards
            process.wait()
    return process.returncode, timed_out


def _split_layers(stderr: str) -> tuple[dict, str]:
    """(the layers the child reported on its first stderr line, the rest of stderr)."""
    if not stderr.startswith(LAYERS_MARK):
        return {}, stderr
    first, _, rest = stderr.partition("\n")
    try:
        return json.loads(first[len(LAYERS_MARK) :]), rest
    except json.JSONDecodeError:
        return {}, rest


def run_program(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``code`` (Python source) in the sandbox; never raises because of what the code does."""
    workdir = Path(tempfile.mkdtemp(prefix="del-sandbox-"))
    private = Path(tempfile.mkdtemp(prefix="del-sandbox-io-"))  # stdout/stderr, out of the program's reach
    started = time.monotonic()
    try:
        (workdir / "program.py").write_text(code, encoding="utf-8")
        owner = _owner_for(limits.user)
        if owner:
            os.chown(workdir, *owner)
            os.chown(workdir / "program.py", *owner)
        config = {
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "output_bytes": limits.output_bytes,
            "open_files": limits.open_files,
            "user": limits.user if owner else None,
        }
        returncode, timed_out = _run_child(workdir, private, config, limits.wall_seconds)
        at_size_cap = any((private / name).stat().st_size >= limits.output_bytes for name in ("stdout", "stderr"))
        stdout = _read(private / "stdout", limits.output_bytes)
        layers, stderr = _split_layers(_read(private / "stderr", limits.output_bytes))
        return SandboxResult(
            _status(timed_out, returncode, stderr, at_size_cap),
            stdout,
            stderr,
            returncode,
            round(time.monotonic() - started, 3),
            layers,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def run_programs(
    codes: Sequence[str], limits: SandboxLimits = SandboxLimits(), workers: int = 4, progress=None
) -> list[SandboxResult]:
    """:func:`run_program` for each code, ``workers`` at a time, results in input order;
    ``progress`` (optional) is called once per finished program."""

    def one(code):
        result = run_program(code, limits)
        if progress is not None:
            progress()
        return result

    if workers <= 1 or len(codes) <= 1:
        return [one(code) for code in codes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, codes))
