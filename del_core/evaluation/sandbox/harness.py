"""Running generated programs in a separate, limited process.

:func:`run_program` writes the program into a fresh temporary directory and runs it with the same
Python in isolated mode (``python -I -B child.py``, whose docstring lists what it sets up
inside) with cwd, HOME and TMPDIR = that directory, a minimal environment, stdin from /dev/null and
stdout/stderr into files kept outside it (each capped by RLIMIT_FSIZE = ``output_bytes``). On
return, and at once when the wall-clock limit passes, the process group is killed with SIGKILL;
both directories are deleted afterwards. ``SandboxLimits.mode`` chooses the isolation:

``namespaces`` (bubblewrap, ``bwrap``): the program runs in its own pid, mount, network, IPC, UTS
(and cgroup) namespaces, as uid 65534 with no capabilities and no_new_privs. Its filesystem is
read-only /usr, /lib*, /bin and the interpreter's directories (``sys.prefix``, ``sys.base_prefix``,
the executable's directory, site-packages; a venv inside a checkout shows only the venv) plus a
private tmpfs working directory of ``WORKDIR_BYTES``: no home, no checkout, no benchmark data, no
/etc, no host /tmp. It cannot see or signal any process outside (the harness included), has no
network, and every process it starts dies with the namespace. As root, bwrap runs privileged and
the child drops to uid 65534 itself (so RLIMIT_NPROC = 0 holds and no new process can start); as
another user, bwrap uses a user namespace mapping that user to 65534, with further user namespaces
disabled. The basic layer's audit hook runs inside too (defence in depth). Not isolated: the
wall-clock share of a CPU, reading the (read-only) interpreter files, and kernel bugs.
``basic``: the child's own layer: rlimits, a new network namespace where the kernel allows it, a
drop to ``user`` (default ``nobody``) when the harness is root and Python is readable by others,
and an audit hook. Not a security boundary: without the drop the program runs as the harness's
user; it can read every file that user can (benchmark golds, the checkout, /proc/<pid>/environ),
and native code or private modules (``_posixsubprocess``) get past the hook, so it may start
processes that outlive the group kill or signal the harness (see ``BASIC_GUARANTEES``).
``none``: rlimits and the wall clock only: no isolation at all, for re-scoring trusted programs.
``auto`` (default): ``namespaces`` when bwrap works here (probed once per process by running a
trivial program in it, :func:`namespaces_available`). Where it does not, running generated programs
needs consent: ``auto`` raises :class:`SandboxUnavailable` (one line: why bwrap failed, and the
fixes) unless the environment variable ``DEL_SANDBOX_ACCEPT_BASIC=1`` (for batch jobs) chooses
``basic``, with one warning on stderr; asking for ``basic`` itself is consent too.
``namespaces`` when bwrap cannot start raises :class:`SandboxUnavailable`.

Statuses: ok, error (non-zero exit or exception), timeout (wall clock or CPU limit), memory_limit
(MemoryError), output_limit (stdout/stderr/file size cap), blocked (a refused operation). The
``layers`` of a result say which mode ran and what took effect inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

CHILD = Path(__file__).resolve().with_name("child.py")
LAYERS_MARK = "SANDBOX-LAYERS "
VIOLATION_MARK = "SANDBOX-VIOLATION"
MODES = ("auto", "namespaces", "basic", "none")
BWRAP = "bwrap"
SANDBOX_UID = SANDBOX_GID = 65534  # nobody / nogroup
CHILD_INSIDE = "/sandbox/child.py"  # where the child script lies inside bubblewrap
WORKDIR_BYTES = 64 << 20  # size of the working directory's tmpfs in namespaces mode
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
# The escape classes of tests/del_core/evaluation/sandbox/test_sandbox_attacks.py and what the basic layer
# does about each (namespaces mode stops them all): "refused" by the audit hook (best effort, when
# the hook itself is not subverted), or not guaranteed.
BASIC_GUARANTEES = {
    "a_private_process_creation": "not guaranteed (refused by RLIMIT_NPROC only after a user drop)",
    "b_outliving_the_group_kill": "not guaranteed (refused by RLIMIT_NPROC only after a user drop)",
    "c_multiprocessing_spawn": "not guaranteed (refused by RLIMIT_NPROC only after a user drop)",
    "d_sub_interpreters": "not guaranteed (refused: new interpreters from Python threads, imports of"
    " _testcapi and the like; loading _testcapi through importlib.util.module_from_spec gets past)",
    "e_hook_state_through_gc": "refused (gc queries, tracing; the hook has no globals, closures or mutable state)",
    "f_dir_fd_and_chdir_writes": "refused (chdir and opening directories outside the working directory)",
    "g_reading_files_and_environ": "not guaranteed (reads as the harness's user, or nobody after a drop)",
    "h_killing_the_harness": "not guaranteed (refused by the kernel only after a user drop)",
}


class SandboxUnavailable(RuntimeError):
    """Mode ``namespaces`` was asked for, but bubblewrap cannot run a program here."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_bytes: int = 2 << 30  # RLIMIT_AS: 2 GiB of address space
    output_bytes: int = 1 << 20  # RLIMIT_FSIZE: stdout, stderr and any file written, 1 MiB each
    open_files: int = 64
    user: Optional[str] = "nobody"  # basic mode: run as this user when the harness is root (None: stay root)
    mode: str = "auto"  # auto, namespaces, basic or none (module docstring)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, got {self.mode!r}")


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


def _interpreter_dirs() -> list[str]:
    """The directories this Python needs inside bubblewrap, outermost first, none inside another:
    the system's library and binary directories and the interpreter's prefixes and site-packages."""
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    wanted += [os.path.dirname(os.path.realpath(sys.executable)), *site.getsitepackages()]
    kept: list[str] = []
    for path in sorted({os.path.abspath(p) for p in wanted if os.path.isdir(p)}, key=len):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in [*SYSTEM_DIRS, *kept]):
            kept.append(path)
    return kept


def _ancestor_dirs(paths: Sequence[str]) -> list[str]:
    """Every proper ancestor directory of ``paths`` (not /, not a system directory), parents first."""
    ancestors = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", "") and parent not in SYSTEM_DIRS:
            ancestors.add(parent)
            parent = os.path.dirname(parent)
    return sorted(ancestors, key=lambda p: (p.count("/"), p))


def _filesystem_arguments(workdir: Path) -> list[str]:
    """bwrap arguments building the sandbox's filesystem (module docstring), all of it read-only
    except the working directory, a tmpfs at the same path as the harness's ``workdir``."""
    args = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    binds = _interpreter_dirs()
    for parent in _ancestor_dirs([*binds, str(workdir), CHILD_INSIDE]):
        args += ["--perms", "0755", "--dir", parent]  # bwrap would make them 0700: unreadable to 65534
    for path in binds:
        args += ["--ro-bind", path, path]
    args += ["--perms", "01777", "--size", str(WORKDIR_BYTES), "--tmpfs", str(workdir)]
    args += ["--ro-bind", str(workdir / "program.py"), str(workdir / "program.py")]
    args += ["--ro-bind", str(CHILD), CHILD_INSIDE, "--proc", "/proc", "--dev", "/dev"]
    return args


def _bwrap_command(workdir: Path) -> list[str]:
    """The bwrap command line up to the program to run (module docstring: namespaces)."""
    args = [BWRAP, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() == 0:  # privileged bwrap; the child drops to 65534 with these two capabilities
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--disable-userns"]
    args += ["--die-with-parent", "--new-session", "--clearenv", "--chdir", str(workdir)]
    for name, value in _child_environment(workdir).items():
        args += ["--setenv", name, value]
    return args + _filesystem_arguments(workdir)


def _command(mode: str, workdir: Path, config: dict) -> list[str]:
    """The command running WORKDIR/program.py through the child in ``mode`` (namespaces, basic, none)."""
    tail = [json.dumps(config), str(workdir / "program.py")]
    if mode == "namespaces":
        return [*_bwrap_command(workdir), sys.executable, "-I", "-B", CHILD_INSIDE, *tail]
    return [sys.executable, "-I", "-B", str(CHILD), *tail]


def _run_child(command: list[str], workdir: Path, private: Path, wall_seconds: float) -> tuple[int, bool]:
    """(return code, timed out) of ``command``, its output in PRIVATE; its process group killed."""
    with open(private / "stdout", "wb") as out, open(private / "stderr", "wb") as err:
        process = subprocess.Popen(
            command,
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


def _child_config(limits: SandboxLimits, mode: str, owner) -> dict:
    return {
        "mode": mode,
        "cpu_seconds": limits.cpu_seconds,
        "memory_bytes": limits.memory_bytes,
        "output_bytes": limits.output_bytes,
        "open_files": limits.open_files,
        "user": limits.user if owner else None,
        "uid": SANDBOX_UID,
        "gid": SANDBOX_GID,
    }


def _result(private: Path, limits: SandboxLimits, mode: str, returncode: int, timed_out: bool, started: float):
    at_size_cap = any((private / name).stat().st_size >= limits.output_bytes for name in ("stdout", "stderr"))
    if mode == "namespaces" and not timed_out and returncode > 128:
        returncode = 128 - returncode  # bwrap exits 128 + N when the program died of signal N
    stdout = _read(private / "stdout", limits.output_bytes)
    layers, stderr = _split_layers(_read(private / "stderr", limits.output_bytes))
    layers.setdefault("mode", mode)
    status = _status(timed_out, returncode, stderr, at_size_cap)
    return SandboxResult(status, stdout, stderr, returncode, round(time.monotonic() - started, 3), layers)


def _run_in_mode(code: str, limits: SandboxLimits, mode: str) -> SandboxResult:
    """:func:`run_program` in a resolved ``mode`` (namespaces, basic or none)."""
    workdir = Path(tempfile.mkdtemp(prefix="del-sandbox-"))
    private = Path(tempfile.mkdtemp(prefix="del-sandbox-io-"))  # stdout/stderr, out of the program's reach
    started = time.monotonic()
    try:
        (workdir / "program.py").write_text(code, encoding="utf-8")
        owner = _owner_for(limits.user) if mode == "basic" else None
        if owner:
            os.chown(workdir, *owner)
            os.chown(workdir / "program.py", *owner)
        command = _command(mode, workdir, _child_config(limits, mode, owner))
        returncode, timed_out = _run_child(command, workdir, private, limits.wall_seconds)
        return _result(private, limits, mode, returncode, timed_out, started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


_PROBE_LOCK = threading.Lock()
_PROBE: dict = {}  # "result": (works, why not), "warned": True once the fallback warning is out
PROBE_CODE = "import json, math, decimal\nprint('sandbox-probe-ok')"
CONSENT_ENV = "DEL_SANDBOX_ACCEPT_BASIC"  # =1: auto falls back to basic where bubblewrap cannot run
FIXES = (
    "install bubblewrap (apt-get install bubblewrap); in a container, let it create namespaces "
    "(podman run --security-opt unmask=/proc/*; docker run --security-opt systempaths=unconfined "
    "--security-opt seccomp=unconfined; launch/docker.sh: SANDBOX_NAMESPACES=1); or accept the weaker "
    f"basic layer on purpose with sandbox=basic ({CONSENT_ENV}=1 for batch jobs)"
)
REFUSAL = "generated programs run only in bubblewrap's namespaces, which cannot be created here: {why}. Fix: " + FIXES
FALLBACK_WARNING = (
    "WARNING: sandbox: bubblewrap namespaces are unavailable ({why}); generated programs run in the "
    "basic sandbox (rlimits, audit hook, network namespace where allowed, a drop to nobody only as "
    "root). It does NOT stop a deliberate program from reading the harness user's files (benchmark "
    "golds, the checkout, /proc/<pid>/environ) or, without the drop, from starting processes through "
    f"private modules and signalling the harness. Accepted by {CONSENT_ENV}=1."
)


def namespaces_available() -> tuple[bool, str]:
    """(whether bubblewrap runs a trivial program here, why not); probed once per process."""
    with _PROBE_LOCK:
        if "result" not in _PROBE:
            _PROBE["result"] = _probe()
        return _PROBE["result"]


def _probe() -> tuple[bool, str]:
    if shutil.which(BWRAP) is None:
        return False, f"{BWRAP} is not installed (not on PATH)"
    try:
        result = _run_in_mode(PROBE_CODE, SandboxLimits(wall_seconds=30, mode="namespaces"), "namespaces")
    except OSError as err:
        return False, f"{BWRAP} could not start: {err}"
    if result.ok and result.stdout == "sandbox-probe-ok\n":
        return True, ""
    why = " ".join((result.stderr.strip() or result.stdout.strip() or result.status).split())[-500:]
    return False, f"{BWRAP} failed ({result.status}, exit {result.returncode}): {why}"


def resolve_mode(mode: str) -> str:
    """The mode to run for ``mode``: auto -> namespaces when available, else basic (warning once)
    with ``DEL_SANDBOX_ACCEPT_BASIC=1`` and :class:`SandboxUnavailable` without; namespaces ->
    :class:`SandboxUnavailable` when bubblewrap cannot run; basic/none unchanged."""
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode in ("basic", "none"):
        return mode
    works, why = namespaces_available()
    if works:
        return "namespaces"
    if mode == "namespaces":
        raise SandboxUnavailable(f"sandbox mode 'namespaces' needs bubblewrap ({BWRAP}), which cannot run here: {why}")
    if os.environ.get(CONSENT_ENV) != "1":
        raise SandboxUnavailable(REFUSAL.format(why=why))
    with _PROBE_LOCK:
        if not _PROBE.get("warned"):
            _PROBE["warned"] = True
            print(FALLBACK_WARNING.format(why=why), file=sys.stderr, flush=True)
    return "basic"


def run_program(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``code`` (Python source) in the sandbox of ``limits.mode``; never raises because of what
    the code does (only :class:`SandboxUnavailable` for mode namespaces where bwrap cannot run)."""
    return _run_in_mode(code, limits, resolve_mode(limits.mode))


def run_programs(
    codes: Sequence[str], limits: SandboxLimits = SandboxLimits(), workers: int = 4, progress=None
) -> list[SandboxResult]:
    """:func:`run_program` for each code, ``workers`` at a time, results in input order;
    ``progress`` (optional) is called once per finished program. No codes: nothing is probed."""
    if not codes:
        return []
    resolve_mode(limits.mode)  # probe, warn or raise once, before any thread starts

    def one(code):
        result = run_program(code, limits)
        if progress is not None:
            progress()
        return result

    if workers <= 1 or len(codes) <= 1:
        return [one(code) for code in codes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, codes))
