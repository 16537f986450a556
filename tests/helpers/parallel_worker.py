"""Worker of the multi-process tests (tests/test_parallel.py): one process of a gloo world.

Each scenario computes, on this rank's vocabulary slice, a loss from sharded logits and from
hidden states with a vocab-parallel LM head, and records the loss, the gradient of the local
logit columns / weight rows, the (all-reduced) gradient of the hidden states, and the calls and
bytes of the forward's all-reduces. A scenario's number vocabulary is ``digits`` and ``point``,
plus ``wide`` (the width-2..K id groups, ordered by value) for a multi-digit one.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from del_core import DigitVocab
from del_core.losses import build_loss_for_model
from del_core.parallel import VocabParallelLMHead, count_collectives, vocab_slice_for


def scenario_inputs(sc):
    """Full logits, hidden, weight, labels and cost embedding of a scenario (same on all ranks)."""
    g = torch.Generator().manual_seed(sc["seed"])
    labels = torch.tensor(sc["labels"])
    dtype = getattr(torch, sc["dtype"])
    hidden = torch.randn(*labels.shape, sc["hidden"], generator=g, dtype=torch.float64).to(dtype)
    weight = (2 * torch.randn(sc["V"], sc["hidden"], generator=g, dtype=torch.float64)).to(dtype)
    logits = (3 * torch.randn(*labels.shape, sc["V"], generator=g, dtype=torch.float64)).to(dtype)
    embedding = torch.randn(sc["V"], 4, generator=g, dtype=torch.float64).to(dtype)
    return logits, hidden, weight, labels, embedding


def make_loss(name, sc, embedding):
    wide = tuple(tuple(group) for group in sc.get("wide", ()))
    vocab = DigitVocab(tuple(sc["digits"]), sc["point"], wide_ids=wide)
    return build_loss_for_model(name, vocab, head_weight=lambda: embedding)


def run_scenario(sc, group=None):
    logits, hidden, weight, labels, embedding = scenario_inputs(sc)
    vslice = vocab_slice_for(sc["V"], group)
    cols = slice(vslice.start, vslice.end)
    result = {"range": (vslice.start, vslice.end)}
    for name in sc["losses"]:
        loss_fn = make_loss(name, sc, embedding)
        local = logits[..., cols].clone().requires_grad_(True)
        with count_collectives() as counter:
            out = loss_fn(local, labels, vocab_slice=vslice)
        out.loss.backward()
        result[(name, "logits")] = {
            "loss": out.loss.item(),
            "aux": out.aux.item(),
            "grad": local.grad,
            "bytes": counter.bytes,
            "calls": counter.calls,
            "metrics": {k: v.item() for k, v in out.metrics.items()},
        }
        head = VocabParallelLMHead.from_full_weight(weight, group)
        h = hidden.clone().requires_grad_(True)
        with count_collectives() as counter:
            out = loss_fn.from_hidden(
                head.gather_input(h), head.weight, labels, vocab_slice=head.vocab_slice, chunk_size=5
            )
        out.loss.backward()
        result[(name, "hidden")] = {
            "loss": out.loss.item(),
            "aux": out.aux.item(),
            "metrics": {k: v.item() for k, v in out.metrics.items()},
            "grad": head.weight.grad,
            "grad_hidden": h.grad,
            "bytes": counter.bytes,
            "calls": counter.calls,
        }
    return result


def head_roundtrip(V, H, group=None):
    """from_full_weight -> forward and full_weight() of a vocab-parallel head."""
    weight = torch.randn(V, H, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    hidden = torch.randn(3, H, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    head = VocabParallelLMHead.from_full_weight(weight, group)
    return {
        "full_equal": torch.equal(head.full_weight(), weight),
        "local_logits": head(hidden).detach(),
        "range": (head.vocab_slice.start, head.vocab_slice.end),
    }


def worker(rank, world, init_file, out_dir, scenarios, V_head):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {key: run_scenario(sc) for key, sc in scenarios.items()}
        results["head"] = head_roundtrip(V_head, 5)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.barrier()
        dist.destroy_process_group()
