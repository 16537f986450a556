"""The guard of tests/conftest.py that keeps ``make test-fast`` in one process: a test without the
``launches`` marker cannot start a subprocess or a multiprocessing process; a marked one can."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import subprocess
import sys

import pytest

REFUSED = "mark it @pytest.mark.launches"


def test_an_unmarked_test_cannot_start_a_process():
    with pytest.raises(RuntimeError, match=REFUSED):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with pytest.raises(RuntimeError, match=REFUSED):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with pytest.raises(RuntimeError, match=REFUSED), concurrent.futures.ProcessPoolExecutor(1) as pool:
        pool.submit(print).result()


@pytest.mark.launches
def test_a_test_marked_launches_can():
    proc = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
    assert proc.stdout == "42\n"
