"""The attention a model trains with under sequence parallelism, and the one it evaluates with.

DeepSpeed's Ulysses (``UlyssesSPAttentionHF``) wraps one of transformers' attention functions:
around it, an all-to-all turns each rank's sequence shard into the whole sequence for a slice of
the heads, and the position ids of the shards are gathered into those of the whole sequence.
It drops the attention mask (built by transformers for the local shard, so useless there). Two
consequences for a run:

* Packed sequences (position ids restarting at 0 for each example, no mask) must keep their
  examples apart. Flash-attention 2 does that from the position ids itself; SDPA with no mask is
  plain causal over the whole row, across examples. :func:`packed_causal_sdpa` is the core SDPA
  Ulysses wraps instead (registered under :data:`PACKED_SDPA`): with no mask it builds the
  block-causal mask of the examples from the gathered position ids (``[B, 1, T, T]`` booleans,
  transformers' own :func:`find_packed_sequence_indices`), then runs transformers' SDPA.
* Evaluation and generation need their masks (left-padded prompts) and whole sequences: they run
  with transformers' own SDPA, which Ulysses did not wrap (:func:`evaluation_attention`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Optional

import torch

# The attention function Ulysses wraps under SDPA (registered with transformers by
# register_packed_sdpa); the model keeps its own "sdpa" unwrapped for evaluation.
PACKED_SDPA = "del_packed_sdpa"
EVALUATION_ATTENTION = "sdpa"


def block_causal_mask(position_ids: torch.Tensor) -> Optional[torch.Tensor]:
    """bool [B, 1, T, T]: position q may attend to k <= q of the same packed example (an example
    starts where the position id does not follow its predecessor's by 1); None when every row is
    one example (plain causal attention is then exact)."""
    from transformers.masking_utils import find_packed_sequence_indices

    examples = find_packed_sequence_indices(position_ids)
    if examples is None:
        return None
    length = position_ids.shape[-1]
    index = torch.arange(length, device=position_ids.device)
    causal = index.unsqueeze(-1) >= index
    return ((examples.unsqueeze(-1) == examples.unsqueeze(-2)) & causal).unsqueeze(1)


def packed_causal_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention; without a mask, over whole sequences (query and key length
    equal to the position ids'), masked block-causally by the packed examples of ``position_ids``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    position_ids = kwargs.get("position_ids")
    whole = position_ids is not None and query.shape[2] == key.shape[2] == position_ids.shape[-1]
    if attention_mask is None and whole:
        attention_mask = block_causal_mask(position_ids)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register_packed_sdpa() -> str:
    """Make :data:`PACKED_SDPA` an attention implementation of transformers (idempotent). No mask
    function is registered for it: under Ulysses the model then builds no mask for the shard."""
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_SDPA, packed_causal_sdpa)
    return PACKED_SDPA


def training_attention(model: Any, attn_implementation: str) -> str:
    """The attention implementation Ulysses wraps for ``model`` loaded with ``attn_implementation``:
    :data:`PACKED_SDPA` (set on the model) for SDPA, else the model's own (flash-attention)."""
    if attn_implementation != "sdpa":
        return attn_implementation
    model.set_attn_implementation(register_packed_sdpa())
    return PACKED_SDPA


@contextlib.contextmanager
def evaluation_attention(model: Any, enabled: bool = True) -> Iterator[None]:
    """Inside the block ``model`` attends with transformers' unwrapped SDPA (masks honoured, whole
    sequences on every rank); its training attention is restored afterwards."""
    if not enabled:
        yield
        return
    trained_with = model.config._attn_implementation
    model.set_attn_implementation(EVALUATION_ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation(trained_with)
