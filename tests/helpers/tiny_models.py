"""The one way the tests and benchmarks build a tiny random model of a real architecture: a Qwen2,
Llama, Mistral or Qwen3 causal LM from its transformers config, seeded, optionally saved with a tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

ARCHITECTURES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
}


def tiny_causal_lm(
    architecture: str,
    vocab_size: int,
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: Optional[int] = None,
    seed: Optional[int] = 0,
    **config: Any,
):
    """A random-initialised ``architecture`` (a key of :data:`ARCHITECTURES`) causal LM with ``vocab_size``
    rows: ``layers`` layers of width ``hidden`` (MLP width ``intermediate``, default 2 x hidden),
    ``heads`` attention heads sharing ``kv_heads`` key/value heads; ``config`` are further keys of
    the architecture's config (``tie_word_embeddings``, ``max_position_embeddings``, token ids,
    ``attn_implementation``...), the rest its defaults. The weights come from
    ``torch.manual_seed(seed)`` (``None``: the generator as it is). fp32, in training mode."""
    import torch
    import transformers

    config_name, model_name = ARCHITECTURES[architecture]
    settings = getattr(transformers, config_name)(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        **config,
    )
    if seed is not None:
        torch.manual_seed(seed)
    return getattr(transformers, model_name)(settings)


def save_tiny_model(
    directory: Path, tokenizer, architecture: str, max_position_embeddings: int = 512, **shape_and_config: Any
) -> Path:
    """:func:`tiny_causal_lm` with a row for every token of ``tokenizer`` (its EOS the model's), saved
    with the tokenizer as a Hugging Face directory; ``shape_and_config`` as there."""
    model = tiny_causal_lm(
        architecture,
        len(tokenizer),
        max_position_embeddings=max_position_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        **shape_and_config,
    )
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return Path(directory)
