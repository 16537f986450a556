"""An outside user's first run, as the README writes it: in a clean Debian container with a fresh
clone of this commit and nothing from this machine but the torch wheel, ``make install``,
``make test-fast`` (no test skipped for missing data) and ``make train`` (the README's held-out
table). The run itself is tests/helpers/outside_user.py; tests/conftest.py starts it in the
background when this test is selected, after the image build, so that it overlaps the suite."""

from __future__ import annotations

import re

import pytest

from helpers.container import podman_unavailable, wait_for_outside_user_run
from helpers.outside_user import README_STEPS
from helpers.shared import REPO

# Skip reasons that mean the clone lacks data a test needs (tests/helpers/shared.py).
MISSING_DATA = ("shared material not found", "DEL_SHARED_DIR", "benchmark", "not found:")


def _readme_setup() -> str:
    readme = (REPO / "README.md").read_text()
    return readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]


def _report(out, steps) -> str:
    """What the run found: each step's exit status and time, and the tail of each log."""
    lines = [f"{row['name']}: exit {row['status']} after {row['seconds']} s" for row in steps]
    for log in sorted(out.glob("*.log")):
        lines += [f"--- tail of {log.name}", *log.read_text(errors="replace").splitlines()[-40:]]
    return "\n".join(lines)


def test_the_readme_names_the_commands_and_packages_the_run_uses():
    setup = _readme_setup()
    for _, command in README_STEPS:
        assert command in setup, command
    assert "python3-venv" in setup and "g++" in setup and "make" in setup


@pytest.mark.container
@pytest.mark.slow
@pytest.mark.launches
def test_an_outside_user_installs_tests_and_trains_as_the_readme_says():
    reason = podman_unavailable()
    if reason is not None:
        pytest.skip(f"the outside user's container cannot run here: {reason}")
    out, steps = wait_for_outside_user_run()
    report = _report(out, steps)
    assert [row["name"] for row in steps] == ["apt", "clone", *(name for name, _ in README_STEPS)], report
    assert all(row["status"] == 0 for row in steps), report

    tests = (out / "test-fast.log").read_text()
    assert re.search(r"\d+ passed", tests), report
    skipped = [line for line in tests.splitlines() if line.startswith("SKIPPED")]
    missing_data = [line for line in skipped if any(word in line for word in MISSING_DATA)]
    assert not missing_data, "\n".join(missing_data)

    readme_table = _readme_setup().split("Held-out (96 rows", 1)[1].split("```", 1)[0]
    trained = (out / "train.log").read_text()
    for line in readme_table.strip().splitlines():
        assert line.strip() in trained, f"README line not in make train's output: {line!r}\n{trained[-3000:]}"
