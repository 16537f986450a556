"""DeepSpeed, the trainer's default engine (:class:`DeepSpeedBackend`) and the glue the Trainer
adapter shares (:mod:`.glue`, its functions re-exported here); the filled DeepSpeed config in
:mod:`.config`. Importing this package does not import DeepSpeed."""

from .backend import DeepSpeedBackend
from .glue import (
    full_state_dict,
    gathered,
    grad_norm,
    gradient_divisor,
    init_distributed,
    initialize,
    parameters_partitioned,
    partitioning_context,
    register_external_weight,
    register_lm_head_weight,
    register_sequence_parallel,
    register_tensor_parallel_head_weight,
    sequence_parallel_dims,
    tensor_parallel_dims,
    ulysses_group,
    vocab_slice_of_head,
    zero_stage,
)

__all__ = [
    "DeepSpeedBackend",
    "full_state_dict",
    "gathered",
    "grad_norm",
    "gradient_divisor",
    "init_distributed",
    "initialize",
    "parameters_partitioned",
    "partitioning_context",
    "register_external_weight",
    "register_lm_head_weight",
    "register_sequence_parallel",
    "register_tensor_parallel_head_weight",
    "sequence_parallel_dims",
    "tensor_parallel_dims",
    "ulysses_group",
    "vocab_slice_of_head",
    "zero_stage",
]
