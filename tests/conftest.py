"""Fixtures shared by every test module; the helpers behind them are in ``tests/helpers/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.shared import benchmark_dir, real_tokenizer


@pytest.fixture(scope="session")
def qwen2_tokenizer():
    return real_tokenizer("qwen2")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark folder of the shared material (gsm8k/, math/, ...); skips without it."""
    return benchmark_dir()
