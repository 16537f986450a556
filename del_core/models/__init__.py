"""The causal LM of a run: where it comes from (one resolver), how it is loaded, how it is exported."""

from .export import drop_tied_copies, save_hf
from .loading import attention_implementation, load_model
from .lora import (
    LoraSettings,
    LoraTargetError,
    check_targets,
    hf_model,
    merged_state_dict,
    parameter_counts,
    save_adapter,
    wrap_with_lora,
)
from .sources import (
    ModelSourceError,
    check_model_source,
    convert_gguf,
    resolve_model,
    resolve_tokenizer,
    smollm2_gguf,
)

__all__ = [
    "LoraSettings",
    "LoraTargetError",
    "ModelSourceError",
    "attention_implementation",
    "check_model_source",
    "check_targets",
    "convert_gguf",
    "drop_tied_copies",
    "hf_model",
    "load_model",
    "merged_state_dict",
    "parameter_counts",
    "resolve_model",
    "resolve_tokenizer",
    "save_adapter",
    "save_hf",
    "smollm2_gguf",
    "wrap_with_lora",
]
