"""Tensor parallelism over the vocabulary: the only place in del_core that uses torch.distributed.

from del_core.parallel import VocabParallelLMHead
head = VocabParallelLMHead.from_full_weight(model.lm_head.weight, group)   # this rank's rows
local_logits = head(hidden)                                                # [..., V_local]
out = loss_fn(local_logits, labels, vocab_slice=head.vocab_slice)          # loss of the full vocab
out = loss_fn.from_hidden(head.gather_input(hidden), head.weight, labels,  # chunked, never [N, V]
                          vocab_slice=head.vocab_slice)
"""

from .comm import (
    CollectiveCounter,
    DistributedReducer,
    copy_to_tensor_parallel_region,
    count_collectives,
    sequence_shard,
    sum_over_sequence_group,
    vocab_range,
)
from .dims import (
    ParallelDims,
    ParallelLayoutError,
    barrier,
    check_head_counts,
    check_sequence_head_counts,
    destroy,
    exit_process,
    gather_vocab_shards,
    local_main_first,
    max_over,
    sequence_head_problem,
    sum_named,
    sum_over,
)
from .lm_head import VocabParallelLMHead, vocab_slice_for
from .rendezvous import free_port, init_process_group, single_process_environment

__all__ = [
    "CollectiveCounter",
    "DistributedReducer",
    "ParallelDims",
    "ParallelLayoutError",
    "VocabParallelLMHead",
    "barrier",
    "check_head_counts",
    "check_sequence_head_counts",
    "sequence_head_problem",
    "single_process_environment",
    "copy_to_tensor_parallel_region",
    "count_collectives",
    "destroy",
    "exit_process",
    "free_port",
    "gather_vocab_shards",
    "init_process_group",
    "local_main_first",
    "max_over",
    "sum_named",
    "sequence_shard",
    "sum_over_sequence_group",
    "sum_over",
    "vocab_range",
    "vocab_slice_for",
]
