"""``exit_process``: the exit code given, the standard streams and logging flushed, and no exit
handler run (the interpreter's finalization is skipped)."""

import subprocess
import sys

import pytest

from helpers.shared import REPO

SCRIPT = """
import atexit, logging, sys
from del_core.parallel import exit_process
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
atexit.register(lambda: print("exit handler ran", flush=True))
print("written, not flushed", end="")
sys.stderr.write("error stream, not flushed")
logging.getLogger("del").info("a log record")
exit_process(3)
print("after exit_process")
"""


@pytest.mark.launches
def test_exit_process_flushes_and_exits_with_the_code_without_finalization():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "written, not flushed"  # no exit handler, nothing after the call
    assert "error stream, not flushed" in done.stderr and "a log record" in done.stderr
