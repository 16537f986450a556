"""Loading Hugging Face tokenizers, including from GGUF files, with a conversion cache.

Converting a GGUF vocabulary into a fast tokenizer takes up to ~20 s for 150k-token vocabularies;
:func:`load_tokenizer` converts once and keeps the result under a cache directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

# The root of every cache del_core writes (converted tokenizers and models): $DEL_CACHE_DIR, or
# ~/.cache/del_core.
CACHE_ROOT = Path(os.environ.get("DEL_CACHE_DIR", Path.home() / ".cache" / "del_core"))
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
    the saved copy. The cache entry is written to a temporary folder and renamed into place, so an
    interrupted conversion never leaves a half-written entry.
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
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=cache))
    try:
        tokenizer.save_pretrained(str(staging))
        os.replace(staging, entry)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process cached it first
    return AutoTokenizer.from_pretrained(str(entry))
