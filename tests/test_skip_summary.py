"""The end-of-run note on tests skipped for missing system packages (tests/helpers/skip_summary.py,
printed by tests/conftest.py): a pytest run, in this process, of a small test file whose tests skip
the way the sandbox, container and Slurm tests do."""

from __future__ import annotations

import pytest

from helpers.skip_summary import collect, summary_lines

pytest_plugins = ("pytester",)

CONFTEST = """
from helpers.skip_summary import write_summary


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    write_summary(terminalreporter)
"""

TESTS = """
import pytest


@pytest.mark.skipif(True, reason="bubblewrap cannot run here: bwrap is not installed (not on PATH)")
def test_sandbox_a():
    pass


@pytest.mark.skipif(True, reason="bubblewrap cannot run here: bwrap is not installed (not on PATH)")
def test_sandbox_b():
    pass


@pytest.mark.container
def test_in_the_image():
    pytest.skip("the image cannot be built here: podman is not installed")


@pytest.mark.slurm
def test_on_the_cluster():
    pytest.skip("a Slurm test cluster needs root (network namespaces, slurmd); run the tests as root")


def test_scontrol():
    pytest.skip("scontrol is not installed: apt-get install --no-install-recommends slurm-client")


def test_other_skip():
    pytest.skip("shared material not found: set DEL_SHARED_DIR")


def test_passes():
    assert True
"""


def test_the_note_names_each_group_once_with_its_count_reasons_and_the_command(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    container: c\n    slurm: s\n")
    pytester.makepyfile(test_skips=TESTS)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=6)
    text = result.stdout.str()
    assert text.count("skipped for missing system packages") == 1
    tail = text[text.index("skipped for missing system packages") :].splitlines()[1:]
    assert tail[:8] == [
        "sandbox (bubblewrap): 2 skipped",
        "    bubblewrap cannot run here: bwrap is not installed (not on PATH)",
        "container (podman, debootstrap, runc, catatonit): 1 skipped",
        "    the image cannot be built here: podman is not installed",
        "slurm (slurm-wlm, slurmctld, slurmd, slurm-client, munge): 2 skipped",
        "    a Slurm test cluster needs root (network namespaces, slurmd); run the tests as root",
        "    scontrol is not installed: apt-get install --no-install-recommends slurm-client",
        "To run them, install the packages (as root, apt-get): make system-deps",
    ]
    assert "DEL_SHARED_DIR" not in "\n".join(tail)


def test_no_note_when_nothing_of_a_group_skipped(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_plain="import pytest\n\ndef test_a():\n    pytest.skip('other reason')\n")
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    assert "system packages" not in result.stdout.str() and "make system-deps" not in result.stdout.str()


@pytest.mark.parametrize(
    "markers, reason, group",
    [
        ({"container"}, "needs root and runuser", "container"),  # by marker, whatever the reason
        ({"slurm", "launches"}, "no cgroup", "slurm"),
        (set(), "Bubblewrap cannot run here", "sandbox"),
        (set(), "scontrol is not installed", "slurm"),
        (set(), "shared material not found", None),
    ],
)
def test_a_skip_is_grouped_by_marker_then_reason(markers, reason, group):
    groups = collect([(markers, reason)])
    assert [g.group.name for g in groups] == ([group] if group else [])


def test_more_reasons_than_shown_are_counted():
    lines = summary_lines(collect([({"container"}, f"reason {i}") for i in range(4)]))
    assert lines[:4] == ["container (podman, debootstrap, runc, catatonit): 4 skipped", "    reason 0", "    reason 1",
                         "    ... and 2 more reasons"]  # fmt: skip
