"""Loading a causal LM for training: attention kernel choice and training settings."""

from __future__ import annotations

import importlib.util

import torch

from del_core.models.sources import ModelSourceError


def attention_implementation(requested: str, on_gpu: bool) -> str:
    """``requested``, or for ``auto``: flash-attention 2 when ``flash_attn`` imports on a GPU, else SDPA."""
    if requested != "auto":
        if requested == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
            raise ModelSourceError("attn_implementation flash_attention_2 needs the flash-attn package")
        return requested
    return "flash_attention_2" if on_gpu and importlib.util.find_spec("flash_attn") is not None else "sdpa"


def load_model(source: str, dtype: torch.dtype, attn_implementation: str, gradient_checkpointing: bool):
    """``AutoModelForCausalLM.from_pretrained(source)`` with training settings applied.

    Under ZeRO-3 the caller keeps transformers' ``HfDeepSpeedConfig`` alive around this call, so
    every parameter is created already partitioned.
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn_implementation)
    model.config.use_cache = False
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model
