"""The sandbox of generated programs: every hostile program ends as a failed/limited result and the
test process (the program's parent) survives."""

import os
import time
import uuid
from pathlib import Path

import pytest

from del_core.evaluation.sandbox import (
    SandboxLimits,
    SandboxUnavailable,
    harness,
    namespaces_available,
    run_program,
    run_programs,
)

LIMITS = SandboxLimits(wall_seconds=4, cpu_seconds=2)


@pytest.mark.launches
def test_a_plain_program_prints_its_answer():
    result = run_program("x = 583 + 1/3\nprint(x)", LIMITS)
    assert (result.status, result.ok, result.stdout, result.returncode) == ("ok", True, "583.3333333333334\n", 0)


@pytest.mark.launches
def test_sympy_and_numpy_still_import():
    result = run_program("import sympy, numpy\nprint(sympy.Rational(1, 3) + 1, numpy.arange(4).sum())", LIMITS)
    assert result.ok and result.stdout == "4/3 6\n"


@pytest.mark.launches
def test_infinite_loop_hits_the_cpu_limit():
    started = time.monotonic()
    result = run_program("while True:\n    pass", LIMITS)
    assert result.status == "timeout" and not result.ok
    assert time.monotonic() - started < LIMITS.wall_seconds + 2


@pytest.mark.launches
def test_sleeping_program_hits_the_wall_clock_limit_and_its_group_is_killed():
    result = run_program("import time\nprint('started', flush=True)\ntime.sleep(60)", SandboxLimits(wall_seconds=1.5))
    assert result.status == "timeout" and result.returncode == -9 and result.stdout == "started\n"


@pytest.mark.launches
def test_fork_bomb_is_refused():
    result = run_program("import os\nwhile True:\n    os.fork()", LIMITS)
    assert result.status == "blocked" and "os.fork" in result.stderr


@pytest.mark.launches
def test_subprocess_is_refused():
    result = run_program("import subprocess\nsubprocess.run(['sh', '-c', 'echo escaped'])", LIMITS)
    assert result.status == "blocked" and "escaped" not in result.stdout


@pytest.mark.launches
def test_ten_gigabyte_allocation_hits_the_memory_limit():
    result = run_program("x = bytearray(10 * 1024 ** 3)\nprint(len(x))", LIMITS)
    assert result.status == "memory_limit" and result.stdout == ""


@pytest.mark.launches
def test_write_to_the_real_home_directory_is_refused():
    target = Path.home() / f"del-sandbox-escape-{uuid.uuid4().hex}.txt"
    try:
        result = run_program(f"open({str(target)!r}, 'w').write('escaped')", LIMITS)
        assert result.status == "blocked" and not target.exists()
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.launches
def test_home_is_the_throwaway_directory_and_is_deleted():
    code = (
        "import os\np = os.path.expanduser('~/note.txt')\nopen(p, 'w').write('kept')\n"
        "print(os.environ['HOME'] == os.getcwd(), open(p).read(), os.getcwd())"
    )
    result = run_program(code, LIMITS)
    same, text, workdir = result.stdout.split()
    assert result.ok and (same, text) == ("True", "kept")
    assert workdir.startswith("/") and not os.path.exists(workdir)


@pytest.mark.launches
def test_socket_connect_is_refused():
    result = run_program("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 22))\nprint('connected')", LIMITS)
    assert result.status == "blocked" and "socket" in result.stderr and result.stdout == ""


@pytest.mark.launches
def test_huge_print_hits_the_output_limit():
    limits = SandboxLimits(wall_seconds=4, cpu_seconds=2, output_bytes=100_000)
    result = run_program("print('x' * 50_000_000)", limits)
    assert result.status == "output_limit" and len(result.stdout) <= 100_000
    result = run_program("while True:\n    print('y' * 1000)", limits)
    assert result.status == "output_limit" and set(result.stdout.replace("\n", "")) == {"y"}


@pytest.mark.launches
def test_killing_the_parent_is_refused_and_the_parent_survives():
    result = run_program("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", LIMITS)
    assert result.status == "blocked"
    result = run_program("import ctypes\nctypes.CDLL(None).kill(__import__('os').getppid(), 9)", LIMITS)
    assert result.status == "blocked"
    os.kill(os.getpid(), 0)  # still here


@pytest.mark.launches
def test_exceptions_are_errors_and_results_keep_input_order():
    results = run_programs(["print(1)", "raise ValueError('boom')", "print(3)"], LIMITS, workers=2)
    assert [r.status for r in results] == ["ok", "error", "ok"]
    assert [r.stdout for r in results] == ["1\n", "", "3\n"] and "ValueError: boom" in results[1].stderr


@pytest.mark.launches
@pytest.mark.skipif(os.geteuid() != 0, reason="the network namespace is only certain as root")
def test_root_runs_programs_without_network_interfaces():
    result = run_program("print('ok')", LIMITS)
    assert result.layers.get("network_namespace") is True


def test_an_unknown_mode_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="auto, namespaces, basic, none"):
        SandboxLimits(mode="docker")


@pytest.mark.launches
@pytest.mark.parametrize("mode", ["basic", "none"])
def test_every_mode_runs_a_plain_program_and_says_which_ran(mode):
    result = run_program("print(6 * 7)", SandboxLimits(wall_seconds=4, cpu_seconds=2, mode=mode))
    assert (result.status, result.stdout, result.layers["mode"]) == ("ok", "42\n", mode)


@pytest.mark.launches
def test_mode_none_has_rlimits_and_the_wall_clock_only():
    limits = SandboxLimits(wall_seconds=1.5, cpu_seconds=2, mode="none")
    assert run_program("import time\ntime.sleep(60)", limits).status == "timeout"
    result = run_program("import socket\nprint(socket.socket() is not None)", limits)
    assert result.ok and result.stdout == "True\n" and result.layers == {"mode": "none"}


@pytest.mark.launches
@pytest.mark.skipif(not namespaces_available()[0], reason=f"bubblewrap cannot run here: {namespaces_available()[1]}")
def test_auto_runs_in_namespaces_where_bubblewrap_works():
    result = run_program("import os\nprint(os.getuid(), os.getpid(), sorted(os.listdir('/')))", LIMITS)
    uid, pid, _ = result.stdout.split(" ", 2)
    assert result.ok and result.layers["mode"] == "namespaces" and (uid, pid) == ("65534", "2")
    assert "home" not in result.stdout and "etc" not in result.stdout


@pytest.fixture
def no_bubblewrap(monkeypatch, tmp_path):
    """A PATH without bwrap and a fresh probe: the real probe finds no bubblewrap."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(harness.CONSENT_ENV, raising=False)
    monkeypatch.setattr(harness, "_PROBE", {})


@pytest.mark.launches
def test_without_bubblewrap_auto_and_namespaces_refuse_naming_why_and_the_fix(no_bubblewrap, capsys):
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*bwrap is not installed"):
        run_program("print(1)", SandboxLimits(mode="namespaces"))
    with pytest.raises(SandboxUnavailable) as refused:
        run_programs(["print(1)", "print(2)"], LIMITS, workers=2)
    message = str(refused.value)
    assert "\n" not in message and "cannot be created here: bwrap is not installed (not on PATH)" in message
    assert "install bubblewrap" in message and "sandbox=basic" in message and "DEL_SANDBOX_ACCEPT_BASIC=1" in message
    assert "unmask=/proc/*" in message and "systempaths=unconfined" in message
    assert run_programs([], LIMITS) == []  # nothing to run: nothing refused
    assert capsys.readouterr().err == ""


@pytest.mark.launches
def test_without_bubblewrap_basic_runs_and_the_batch_variable_falls_back_with_one_warning(
    no_bubblewrap, monkeypatch, capsys
):
    assert run_program("print(1)", SandboxLimits(wall_seconds=4, cpu_seconds=2, mode="basic")).layers["mode"] == "basic"
    assert capsys.readouterr().err == ""  # chosen on purpose: no warning
    monkeypatch.setenv(harness.CONSENT_ENV, "1")
    results = run_programs(["print(1)", "print(2)"], LIMITS, workers=2)
    assert [(r.status, r.stdout, r.layers["mode"]) for r in results] == [("ok", "1\n", "basic"), ("ok", "2\n", "basic")]
    assert run_program("print(3)", LIMITS).layers["mode"] == "basic"
    warnings = [line for line in capsys.readouterr().err.splitlines() if "namespaces are unavailable" in line]
    assert len(warnings) == 1 and "bwrap is not installed" in warnings[0] and "does NOT stop" in warnings[0]
