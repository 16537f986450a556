"""Loading Hugging Face tokenizers, including from GGUF files, with a conversion cache.

Converting a GGUF vocabulary into a fast tokenizer takes up to ~20 s for 150k-token vocabularies
(minutes for Gemma-4's 262k tokens on a busy machine); :func:`load_tokenizer` converts once and keeps
the result under a cache directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

# The root of every cache del_core writes (converted tokenizers, models, fetched vocabularies):
# $DEL_CACHE_DIR, else $XDG_CACHE_HOME/del_core, else ~/.cache/del_core.
CACHE_ROOT = Path(
    os.environ.get("DEL_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "del_core"
)
DEFAULT_CACHE = CACHE_ROOT / "tokenizers"


def gguf_cache_key(path: Path) -> str:
    """The cache entry name of a GGUF file: its stem and a digest of its path, size and mtime."""
    stat = path.stat()
    digest = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:16]
    return f"{path.stem}-{digest}"


def load_tokenizer(source: Union[str, os.PathLike], cache_dir: Optional[Union[str, os.PathLike]] = None) -> Any:
    """Load a tokenizer from a Hugging Face directory/name, or from a ``.gguf`` file.

    A GGUF file is converted once (needs the ``gguf`` package) and saved under ``cache_dir``
    (default ``$DEL_CACHE_DIR/tokenizers`` or ``~/.cache/del_core/tokenizers``); later calls load
    the saved copy. Files transformers' GGUF route refuses (an architecture it does not know, a
    config it cannot validate: Command-R, Gemma-4) or misreads (Qwen3.5's pre-tokenizer) are rebuilt
    from their vocabulary fields alone (:mod:`del_core.tokenizers.gguf_vocab`). The cache entry is
    written to a temporary folder and renamed into place, so an interrupted conversion never leaves
    a half-written entry.
    """
    from transformers import AutoTokenizer

    path = Path(source)
    if path.suffix != ".gguf":
        return AutoTokenizer.from_pretrained(str(source))
    if not path.is_file():
        raise FileNotFoundError(f"GGUF tokenizer file not found: {path}")
    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    entry = cache / gguf_cache_key(path)
    if (entry / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(str(entry))
    tokenizer = _convert_gguf(path)
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=cache))
    try:
        tokenizer.save_pretrained(str(staging))
        os.replace(staging, entry)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process cached it first
    return AutoTokenizer.from_pretrained(str(entry))


def _convert_gguf(path: Path) -> Any:
    """The tokenizer of a GGUF file: transformers' GGUF route, else (refused, or a file it misreads:
    ``TokenizerKind.rebuild_preferred``) the vocabulary-fields rebuild."""
    from transformers import AutoTokenizer

    from del_core.tokenizers.gguf_vocab import UnsupportedGGUFVocabulary, read_tokenizer_kind, tokenizer_from_gguf_vocab

    if read_tokenizer_kind(path).rebuild_preferred:
        return tokenizer_from_gguf_vocab(path)
    try:
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, TypeError, KeyError, *_config_validation_errors()) as refusal:
        try:
            return tokenizer_from_gguf_vocab(path)
        except UnsupportedGGUFVocabulary as unsupported:
            raise UnsupportedGGUFVocabulary(
                f"transformers cannot load {path} ({type(refusal).__name__}: {str(refusal).splitlines()[0]}), "
                f"and neither can the tokenizer-only rebuild: {unsupported}"
            ) from refusal


def _config_validation_errors() -> tuple[type[BaseException], ...]:
    """huggingface_hub's strict-dataclass error (transformers 5 validates a GGUF file's config with it)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # older huggingface_hub: configs are not validated
        return ()
    return (StrictDataclassError,)
