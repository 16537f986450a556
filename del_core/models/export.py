"""Writing a trained model in Hugging Face format (safetensors + tokenizer), atomically."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import torch


def drop_tied_copies(lm: Any, state: dict) -> None:
    """Remove the output head's entry when the model ties it to the input embedding (some gathers,
    e.g. AutoTP's under ZeRO-2, return both); the two must hold the same values."""
    tied = getattr(lm, "_tied_weights_keys", None)
    if not isinstance(tied, dict) or not getattr(lm.config, "tie_word_embeddings", False):
        return
    for target, source in tied.items():
        if target in state and source in state:
            if not torch.equal(state[target], state[source]):
                raise RuntimeError(f"export: tied weights {target} and {source} differ")
            del state[target]


def save_hf(
    model: Any,
    state_dict: dict,
    tokenizer: Any,
    out_dir: Path,
    extra_files: Optional[dict] = None,
    write_extra: Optional[Callable[[Path], None]] = None,
) -> None:
    """Write ``state_dict`` as a Hugging Face model (safetensors) + tokenizer to ``out_dir``,
    replacing it only once the new copy is complete (``extra_files``: name -> text;
    ``write_extra``: called with the staging directory to add more, e.g. a LoRA adapter, so that
    it is part of the same all-or-nothing replacement)."""
    out_dir = Path(out_dir)
    staging = out_dir.with_name(f".{out_dir.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging), state_dict=state_dict)
    tokenizer.save_pretrained(str(staging))
    for name, text in (extra_files or {}).items():
        (staging / name).write_text(text)
    if write_extra is not None:
        write_extra(staging)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
        os.replace(staging, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out_dir)
