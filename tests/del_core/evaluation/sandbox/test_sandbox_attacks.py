"""Known escapes from the sandbox of generated programs, one program per class, run in namespaces
mode (all must be contained) and, for the classes the basic layer refuses (``BASIC_GUARANTEES``), in
basic mode. Contained means: the decoy files (outside the sandbox, in the checkout) keep their
content and mtime, the decoy process lives, the secret (in a decoy file and in the environment of
the harness and of the decoy process) appears nowhere in the output, the harness gets a result, no
process started by the program outlives the run, and the sandbox's temporary folders are gone."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from del_core.evaluation.sandbox.harness import (
    BASIC_GUARANTEES,
    SandboxLimits,
    SandboxResult,
    namespaces_available,
    run_program,
)
from helpers.shared import REPO

NAMESPACES, WHY_NOT = namespaces_available()
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=f"bubblewrap cannot run here: {WHY_NOT}")
LIMITS = {mode: SandboxLimits(wall_seconds=4, cpu_seconds=2, mode=mode) for mode in ("namespaces", "basic")}
SUCCESS_WORDS = ("SPAWNED", "WROTE", "READ ", "SUB ")  # what an attack prints when a step got through


@dataclass
class Decoys:
    secret: str
    marker: str  # in the command line of every process an attack tries to start
    outside: Path  # a secret file outside the sandbox, beside its temporary folders
    checkout: Path  # a secret file in the checkout
    process: subprocess.Popen  # a decoy process with the secret in its environment
    tmp_root: Path  # where the sandbox makes its temporary folders in this test
    snapshot: dict


def _snapshot(paths) -> dict:
    return {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in paths}


@pytest.fixture
def decoys(tmp_path, monkeypatch):
    secret, marker = f"del-secret-{uuid.uuid4().hex}", f"del-marker-{uuid.uuid4().hex}"
    monkeypatch.setenv("DEL_SANDBOX_SECRET", secret)
    outside = tmp_path / "outside" / "secret.txt"
    outside.parent.mkdir()
    outside.write_text(secret)
    checkout = REPO / f".sandbox-decoy-{uuid.uuid4().hex}.txt"
    checkout.write_text(secret)
    tmp_root = tmp_path / "tmp"
    tmp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_root))
    process = subprocess.Popen(["sleep", "60"], env={**os.environ, "DEL_SANDBOX_SECRET": secret})
    try:
        yield Decoys(secret, marker, outside, checkout, process, tmp_root, _snapshot([outside, checkout]))
    finally:
        process.kill()
        process.wait()
        checkout.unlink(missing_ok=True)


def _marked_processes(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(f"{entry.name}: {cmdline!r}")
    return found


def assert_contained(result, d: Decoys) -> None:
    assert isinstance(result, SandboxResult)  # the harness got a result
    output = result.stdout + result.stderr
    assert d.secret not in output
    assert not [word for word in SUCCESS_WORDS if word in result.stdout], result.stdout
    assert _snapshot(d.snapshot) == d.snapshot
    assert d.process.poll() is None, "the decoy process was killed"
    assert not _marked_processes(d.marker), "a process of the program outlived the run"
    assert list(d.tmp_root.iterdir()) == [], "temporary folders left behind"
    os.kill(os.getpid(), 0)  # the harness itself is alive


def _program(template: str, d: Decoys) -> str:
    values = {
        "MARKER": d.marker,
        "OUTSIDE": str(d.outside),
        "CHECKOUT": str(d.checkout),
        "HARNESS": os.getpid(),
        "DECOY": d.process.pid,
        "REPO": str(REPO),
        "SHARED": os.environ.get("DEL_SHARED_DIR", str(REPO.parent / "shared")),
        "PYTHON": sys.executable,
    }
    prelude = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    return prelude + "import os, sys\n" + template


FORK_EXEC = """
import _posixsubprocess, subprocess
def fork_exec(argv, setsid=False):
    errpipe = os.pipe()
    return _posixsubprocess.fork_exec(
        argv, [os.fsencode(argv[0])], True, (), None, None, -1, -1, -1, -1, -1, -1, *errpipe,
        False, setsid, -1, None, None, None, -1, None, subprocess._USE_VFORK)
"""

ATTACKS = {
    "a_private_process_creation": FORK_EXEC
    + """
try:
    fork_exec(["/bin/sh", "-c", "echo SPAWNED-$(id -u) " + MARKER + "; sleep 30"])
    import time; time.sleep(1)
except OSError as err:
    print("refused", err)
""",
    "b_outliving_the_group_kill": FORK_EXEC
    + """
code = "import os, time\\nif os.fork(): os._exit(0)\\nos.setsid()\\nprint('SPAWNED', flush=True)\\ntime.sleep(30)"
try:
    import posix; posix.setsid()
except Exception as err:
    print("refused", err)
try:
    fork_exec([PYTHON, "-c", code + "  # " + MARKER], setsid=True)
    import time; time.sleep(1)
except OSError as err:
    print("refused", err)
""",
    "c_multiprocessing_spawn": """
import multiprocessing
def escape():
    os.system("echo SPAWNED-$(id -u) " + MARKER + "; sleep 30")
if __name__ == "__main__":
    try:
        child = multiprocessing.get_context("spawn").Process(target=escape)
        child.start()
        child.join(2)
    except Exception as err:
        print("refused", type(err).__name__, err)
""",
    "d_sub_interpreters": """
code = f"import os; os.system('echo SPAWNED-$(id -u) {MARKER}'); print('SUB', open({OUTSIDE!r}).read())"
for name in ("_interpreters", "_xxsubinterpreters"):
    try:
        interpreters = __import__(name)
        interpreters.run_string(interpreters.create(), code)
    except Exception as err:
        print("refused", name, type(err).__name__, err)
try:
    import _testcapi
    _testcapi.run_in_subinterp(code)
except Exception as err:
    print("refused _testcapi", type(err).__name__, err)
""",
    "e_hook_state_through_gc": """
import gc
for query in (gc.get_objects, lambda: gc.get_referrers(os), lambda: gc.get_referents(os.fork)):
    try:
        for item in query():
            if isinstance(item, set) and ("os.fork" in item or "/dev/null" in item):
                item.clear() if "os.fork" in item else item.add(OUTSIDE)
            elif isinstance(item, dict) and "os.remove" in item:
                item.clear()
            elif callable(item) and getattr(item, "__closure__", None):
                for cell in item.__closure__:
                    if isinstance(cell.cell_contents, (set, frozenset)):
                        cell.cell_contents = frozenset()
    except Exception as err:
        print("refused", type(err).__name__, err)
frame = sys._getframe()
while frame is not None:  # the child's globals, through the frames
    if "_REFUSED" in frame.f_globals:
        frame.f_globals.update(_REFUSED=frozenset(), _PATH_EVENTS={}, _WRITE_FLAGS=0)
    frame = frame.f_back
for attempt in (
    lambda: os.system("echo SPAWNED-$(id -u) " + MARKER),
    lambda: os.write(os.open(OUTSIDE, os.O_WRONLY | os.O_TRUNC), b"pwned") and print("WROTE outside"),
    lambda: open(CHECKOUT, "w").write("pwned") and print("WROTE checkout"),
    lambda: os.remove(CHECKOUT) or print("WROTE removed"),
):
    try:
        attempt()
    except Exception as err:
        print("refused", type(err).__name__, err)
""",
    "f_dir_fd_and_chdir_writes": """
folder, name = os.path.split(OUTSIDE)
def via_dir_fd(flags):
    fd = os.open(folder, flags)
    os.write(os.open(name, os.O_WRONLY | os.O_TRUNC, dir_fd=fd), b"pwned")
    print("WROTE dir_fd")
def via_chdir():
    os.chdir(folder)
    open(name, "w").write("pwned")
    print("WROTE chdir")
def via_fchdir():
    os.fchdir(os.open(folder, os.O_RDONLY))
    open(name, "w").write("pwned")
    print("WROTE fchdir")
def via_symlink():
    os.symlink(folder, "link")
    open("link/" + name, "w").write("pwned")
    print("WROTE symlink")
def via_proc_root():
    open("/proc/self/root" + CHECKOUT, "w").write("pwned")
    print("WROTE proc root")
for attempt in (lambda: via_dir_fd(os.O_RDONLY), lambda: via_dir_fd(os.O_PATH), via_chdir, via_fchdir,
                via_symlink, via_proc_root, lambda: os.utime(CHECKOUT, (0, 0)) or print("WROTE utime")):
    try:
        attempt()
    except Exception as err:
        print("refused", type(err).__name__, err)
""",
    "g_reading_files_and_environ": """
shared = [os.path.join(root, f) for root, _, files in os.walk(SHARED) for f in files][:3]
files = [OUTSIDE, CHECKOUT, os.path.join(REPO, "del_core/evaluation/sandbox/harness.py"), "/root/.bashrc", *shared]
for path in files:
    try:
        print("READ", path, open(path, "rb").read(2000))
    except Exception as err:
        print("unreadable", path, type(err).__name__)
for pid in (HARNESS, DECOY, os.getppid(), 1):
    try:
        print("PROC", pid, open(f"/proc/{pid}/environ", "rb").read())
    except Exception as err:
        print("unreadable", pid, type(err).__name__)
print("ENV", dict(os.environ))
for folder in (REPO, os.path.dirname(OUTSIDE), "/root"):
    try:
        print("LISTED", folder, os.listdir(folder))
    except Exception as err:
        print("unlistable", folder, type(err).__name__)
""",
    "h_killing_the_harness": FORK_EXEC
    + """
import ctypes, signal
for pid in (HARNESS, DECOY, os.getppid()):
    for how in (
        lambda: os.kill(pid, 9),
        lambda: __import__("posix").kill(pid, 9),
        lambda: ctypes.CDLL(None).kill(pid, 9),
        lambda: signal.pidfd_send_signal(os.pidfd_open(pid), 9),
        lambda: fork_exec(["/bin/sh", "-c", f"kill -9 {pid}; : {MARKER}"]),
    ):
        try:
            how()
        except Exception as err:
            print("refused", pid, type(err).__name__, err)
""",
}


@pytest.mark.launches
@needs_namespaces
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_namespaces_contain_the_attack(attack, decoys):
    result = run_program(_program(ATTACKS[attack], decoys), LIMITS["namespaces"])
    assert result.layers["mode"] == "namespaces"
    assert_contained(result, decoys)
    if attack == "g_reading_files_and_environ":  # the checkout, beyond the venv, is not there at all
        listed = [line for line in result.stdout.splitlines() if line.startswith("LISTED")]
        assert not [line for line in listed if "'del_core'" in line or decoys.checkout.name in line], listed


BASIC_REFUSES = sorted(name for name, what in BASIC_GUARANTEES.items() if what.startswith("refused"))


@pytest.mark.launches
@pytest.mark.parametrize("attack", BASIC_REFUSES)
def test_basic_refuses_what_it_guarantees(attack, decoys):
    result = run_program(_program(ATTACKS[attack], decoys), LIMITS["basic"])
    assert result.layers["mode"] == "basic" and result.status == "blocked"
    assert_contained(result, decoys)


def test_the_basic_guarantees_table_covers_every_attack_and_admits_the_rest():
    assert set(BASIC_GUARANTEES) == set(ATTACKS)
    not_guaranteed = {name for name, what in BASIC_GUARANTEES.items() if what.startswith("not guaranteed")}
    assert not_guaranteed | set(BASIC_REFUSES) == set(ATTACKS)
    assert not_guaranteed == {
        "a_private_process_creation",
        "d_sub_interpreters",
        "b_outliving_the_group_kill",
        "c_multiprocessing_spawn",
        "g_reading_files_and_environ",
        "h_killing_the_harness",
    }


CONTROLS = {"f_dir_fd_and_chdir_writes": "WROTE", "g_reading_files_and_environ": "READ "}


@pytest.mark.launches
@pytest.mark.parametrize("attack", sorted(CONTROLS))
def test_the_attacks_get_through_without_a_sandbox(attack, decoys):
    """The controls: with mode none (rlimits only) the same programs do write and read the decoys,
    so the containment tests above would fail if the isolation were missing."""
    result = run_program(_program(ATTACKS[attack], decoys), SandboxLimits(wall_seconds=4, cpu_seconds=2, mode="none"))
    assert result.layers["mode"] == "none" and CONTROLS[attack] in result.stdout
    if attack == "g_reading_files_and_environ":
        assert decoys.secret in result.stdout
    else:
        assert decoys.outside.read_text() == "pwned"


@pytest.mark.launches
@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC = 0 stops the fork of a non-root control")
def test_private_process_creation_gets_through_without_a_sandbox(decoys):
    result = run_program(_program(ATTACKS["a_private_process_creation"], decoys), SandboxLimits(mode="none"))
    try:
        assert "SPAWNED-0" in result.stdout
    finally:
        for line in _marked_processes(decoys.marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), 9)
