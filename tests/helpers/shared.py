"""The material of the tests from outside the package: the real tokenizer vocabularies and the
benchmark files (the repository's ``data/benchmarks``).

The directory holding ``vocab/`` comes from ``DEL_SHARED_DIR`` (``.ci/run`` sets it); without it,
``../shared`` beside the repository is used when present. Converted tokenizers
are cached (``del_core.tokenizers``), so only the first run pays the ~40 s of GGUF conversion.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SINGLE_DIGIT_VOCABS = ("qwen2", "deepseek-llm", "llama-spm", "phi-3")
MULTI_DIGIT_VOCABS = ("llama-bpe",)  # Llama-3: number tokens of 1..3 digits
REFUSED_VOCABS = ("gpt-2",)  # irregular merges: refused (docs/number_tokens.md)


def shared_dir() -> Path | None:
    env = os.environ.get("DEL_SHARED_DIR")
    if env:
        path = Path(env)
        if not (path / "vocab").is_dir():
            raise RuntimeError(f"DEL_SHARED_DIR={env} has no vocab/ folder")
        return path
    fallback = REPO.parent / "shared"
    return fallback if (fallback / "vocab").is_dir() else None


_TOKENIZERS: dict = {}


def real_tokenizer(name: str):
    """The real tokenizer ``ggml-vocab-<name>.gguf``; skips when the shared material is absent."""
    root = shared_dir()
    if root is None:
        pytest.skip("shared material not found: set DEL_SHARED_DIR")
    if name not in _TOKENIZERS:
        from del_core.tokenizers import load_tokenizer

        _TOKENIZERS[name] = load_tokenizer(root / "vocab" / f"ggml-vocab-{name}.gguf")
    return _TOKENIZERS[name]


def benchmark_dir() -> Path:
    """The benchmark folder the repository carries (gsm8k/, math/, ...): what ``recipes/evaluate.py``
    reads without ``--data-dir``."""
    from del_core.evaluation.benchmarks.data import REPOSITORY_DATA_DIR

    return REPOSITORY_DATA_DIR
