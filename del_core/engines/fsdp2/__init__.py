"""FSDP2, torch's ``fully_shard``: the engine (:mod:`.engine`) and its life in a run
(:class:`FSDP2Backend`). Importing this package does not import torch's FSDP2 modules."""

from .backend import FSDP2Backend
from .engine import (
    FSDP2Engine,
    FSDP2Settings,
    ShardBytes,
    decoder_layers,
    gradient_divisor,
    initialize,
    shard,
    shard_bytes,
)

__all__ = [
    "FSDP2Backend",
    "FSDP2Engine",
    "FSDP2Settings",
    "ShardBytes",
    "decoder_layers",
    "gradient_divisor",
    "initialize",
    "shard",
    "shard_bytes",
]
