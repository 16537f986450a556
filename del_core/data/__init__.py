"""Training data: instruction rows, prompts, tokenised examples and batches, the synthetic
generator, and the one JSON-lines reader/writer. Imports neither DeepSpeed nor torch.distributed."""

from .jsonl import JsonlAppender, JsonlError, iter_jsonl, read_jsonl, write_jsonl
from .prompting import format_prompt
from .rows import DataError, check_source, load_rows, read_source
from .tokenized import EncodeReport, Example, Packed, TokenBatch, collate, encode, encode_all, pack, shuffled

__all__ = [
    "DataError",
    "EncodeReport",
    "Example",
    "JsonlAppender",
    "JsonlError",
    "Packed",
    "TokenBatch",
    "check_source",
    "collate",
    "encode",
    "encode_all",
    "format_prompt",
    "iter_jsonl",
    "load_rows",
    "pack",
    "read_jsonl",
    "read_source",
    "shuffled",
    "write_jsonl",
]
