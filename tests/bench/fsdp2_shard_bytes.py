"""Per-rank bytes of parameters, gradients and optimizer state under ``parallel.engine=fsdp2``,
measured after the first optimizer step of a real trainer set-up (not run by CI).

    python -m torch.distributed.run --nproc_per_node=N tests/bench/fsdp2_shard_bytes.py MODEL_DIR

prints one line per rank: the local shards' bytes (``FSDP2Engine.first_step_bytes``), which
should be the single process's divided by N (rows are padded to a multiple of N), and beside them
what the memory model (:func:`del_core.memory_model.model_state_bytes`, fully sharded
fp32 weights, gradients and AdamW moments) predicts for N ranks.
"""

from __future__ import annotations

import sys
import tempfile

from transformers import AutoConfig

from del_core.memory_model import ModelShape, TrainShape, model_state_bytes
from del_core.parallel import destroy
from del_core.training import load_train_config
from del_core.training.trainer import Trainer


def predicted(model: str, world: int) -> str:
    """The memory model's (weights, gradients, optimizer state) bytes per rank, fp32, fully sharded."""
    shape = ModelShape.from_hf_config(AutoConfig.from_pretrained(model))
    weights, grads, optimizer, _ = model_state_bytes(shape, TrainShape(seq_len=128, world=world, dtype_bytes=4))
    return f"params {weights:,} grads {grads:,} optimizer {optimizer:,} total {weights + grads + optimizer:,}"


def main(model: str) -> None:
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"model={model}",
            "data=synthetic:40",
            "data.eval_size=0",
            "data.max_length=128",
            "run.global_batch_size=4",
            "run.micro_batch_size=1",
            "run.max_steps=1",
            "run.report_to=none",
            "run.export=false",
            "parallel.engine=fsdp2",
            f"run.output_dir={out}",
        ]
        trainer = Trainer(load_train_config(None, overrides))
        trainer.setup()
        trainer.train_step()
        used = trainer.engine.first_step_bytes
        print(
            f"[bytes] world {trainer.dims.world} rank {trainer.dims.rank}: params {used.params:,} "
            f"grads {used.grads:,} optimizer {used.optimizer:,} total {used.total:,}\n"
            f"[model] predicted: {predicted(model, trainer.dims.world)}",
            flush=True,
        )
        trainer.cleanup()
    destroy()


if __name__ == "__main__":
    main(sys.argv[1])
