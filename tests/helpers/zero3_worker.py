"""Worker of tests/test_zero3_chunked.py: a tiny LM trained for a few steps under DeepSpeed ZeRO-3
(CPU, gloo) with the chunked loss reading the partitioned LM-head weight."""

from __future__ import annotations

import json
import os

import torch

from del_core import DigitVocab, build_loss

VOCAB = DigitVocab(tuple(range(3, 13)), 1)
V, H, STEPS, LR = 40, 8, 3, 0.5


class TinyLM(torch.nn.Module):
    """body -> tanh -> LM head; the loss is computed chunk by chunk from the hidden states."""

    def __init__(self, zero3: bool):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(H, H)
        self.lm_head = torch.nn.Linear(H, V, bias=False)
        self.loss_fn = build_loss("del", VOCAB, weight=0.5)
        if zero3:
            import deepspeed

            # The loss reads the head's weight outside the head's own forward: ZeRO-3 must gather
            # it for this module's forward and backward.
            deepspeed.zero.register_external_parameter(self, self.lm_head.weight)

    def forward(self, x, labels):
        hidden = torch.tanh(self.body(x))
        return self.loss_fn.from_hidden(hidden, self.lm_head.weight, labels, chunk_size=3).loss


def batch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, H, generator=g)
    labels = torch.randint(0, V, (2, 7), generator=g)
    labels[0, 2:5] = torch.tensor([5, 1, 9])  # a number "2.6"
    labels[1, 0] = -100
    return x, labels


def reference_losses() -> list[float]:
    """The same training without DeepSpeed, in this process."""
    model = TinyLM(zero3=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    x, labels = batch()
    losses = []
    for _ in range(STEPS):
        loss = model(x, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        DS_ACCELERATOR="cpu",
    )
    torch.set_num_threads(1)
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = TinyLM(zero3=True)
    partitioned = model.lm_head.weight.numel() == 0
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR), config=config)
    x, labels = batch()  # the same batch on every rank: the averaged gradient is the single one
    losses = []
    for _ in range(STEPS):
        loss = engine(x, labels)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
        json.dump({"losses": losses, "partitioned": partitioned}, handle)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
