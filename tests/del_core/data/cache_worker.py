"""One local rank of the two-process cache test (tests/del_core/data/test_dataset_cache.py), started
by torch.distributed.run: loads the data through the cache under local_main_first, then writes its
log lines and the collated micro-batches of its data-parallel rank for the first steps as JSON.

    python -m torch.distributed.run --nproc_per_node 2 cache_worker.py TOKENIZER_DIR REQUEST.json CACHE OUT_PREFIX
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import torch.distributed as dist
from transformers import AutoTokenizer

from del_core.data.dataset_cache import DataRequest, prepare_cached_training_data
from del_core.data.tokenized import collate
from del_core.parallel import local_main_first
from del_core.training.schedule import StepPlan

GLOBAL_BATCH, MICRO_BATCH, STEPS = 8, 2, 3


def rank_batches(items, plan: StepPlan, rank: int, pad_id: int) -> list[dict]:
    """The collated micro-batches of ``rank`` for the first STEPS steps, as lists."""
    batches = []
    for step in range(STEPS):
        for micro in plan.micro_batches(step, rank):
            batch = collate([items[i] for i in micro], pad_id)
            batches.append({name: getattr(batch, name).tolist() for name in ("input_ids", "targets", "position_ids")})
    return batches


def main(tokenizer_dir: str, request_path: str, cache_dir: str, out_prefix: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    request = DataRequest(**json.loads(Path(request_path).read_text()))
    logs: list[str] = []
    local_rank = int(os.environ["LOCAL_RANK"])
    data = prepare_cached_training_data(request, tokenizer, logs.append, cache_dir, 1, local_main_first(local_rank))
    plan = StepPlan(len(data.items), GLOBAL_BATCH, MICRO_BATCH, world, request.seed)
    result = {
        "logs": logs,
        "batches": rank_batches(data.items, plan, rank, tokenizer.eos_token_id),
        "eval_rows": data.eval_rows,
        "eval_examples": [asdict(e) for e in data.eval_examples],
    }
    Path(f"{out_prefix}.{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])
