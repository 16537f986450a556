"""The real Slurm test cluster, one per test session (tests/helpers/slurm_cluster.py)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.slurm_cluster import ClusterLayout, SlurmCluster, cannot_run_reason, slurm_conf


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a CI time-out, ``kill``) raises KeyboardInterrupt in the test process, so that
    pytest still tears the session's fixtures down (the cluster included)."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """slurmctld, munged and two slurmd nodes (~1 s to start); skips, saying why, where the
    machine cannot run them. Teardown fails the session when anything is left behind."""
    reason = cannot_run_reason()
    if reason:
        pytest.skip(reason)
    # The set-up runs in a test marked launches; the session's teardown runs in the last test's,
    # which may be unmarked (tests/conftest.py then refuses process starts): it stops the cluster
    # with the process start of the set-up.
    execute_child = subprocess.Popen._execute_child
    cluster = SlurmCluster(ClusterLayout())
    with _sigterm_interrupts():
        cluster.start()
        try:
            yield cluster
        finally:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(subprocess.Popen, "_execute_child", execute_child)
                cluster.stop()


@pytest.fixture(scope="module")
def slurm_config(tmp_path_factory) -> Path:
    """A slurm.conf of the test cluster with no daemon behind it: enough for ``scontrol show
    hostnames`` (launch/slurm/train.sbatch's dry run)."""
    path = tmp_path_factory.mktemp("slurm-conf") / "slurm.conf"
    path.write_text(slurm_conf(ClusterLayout(), "localhost"))
    return path
