"""The causal LM of a run: where it comes from (one resolver), how it is loaded, how it is exported."""

from .export import drop_tied_copies, save_hf
from .loading import attention_implementation, load_model
from .sources import (
    ModelSourceError,
    check_model_source,
    convert_gguf,
    resolve_model,
    resolve_tokenizer,
    smollm2_gguf,
)

__all__ = [
    "ModelSourceError",
    "attention_implementation",
    "check_model_source",
    "convert_gguf",
    "drop_tied_copies",
    "load_model",
    "resolve_model",
    "resolve_tokenizer",
    "save_hf",
    "smollm2_gguf",
]
