"""The compacted loss paths: only the scored positions go through the LM head and the loss, with
the same loss, gradients and metrics as the full paths, for every loss of the catalog.

A tiny float64 Qwen2 on the toy vocabulary, through the trainer's objective; the batch is mostly
ignored positions (prompts and padding), with numbers on both sides of ignored stretches. Two
broken compactions must differ from the full loss: spans found after the ignored positions are
dropped (numbers merge across them), and rows gathered one position off.
"""

from __future__ import annotations

import pytest
import torch

from del_core import LOSS_NAMES, number_spans
from del_core.config import ConfigError
from del_core.data.sequence_shards import pad_batch, shard_batch
from del_core.data.tokenized import TokenBatch
from del_core.losses import CompactedPath, LossCalls, build_loss_path, scored_positions
from del_core.training.config import load_train_config
from del_core.training.objective import CausalLMObjective
from helpers.host_syncs import count_host_syncs
from helpers.tiny_models import tiny_causal_lm
from helpers.toy_vocab import VOCAB, V, build, encode

# '_' is an ignored position (-100); the rows end in padding, and the third row is padding only.
TEXTS = [
    "____12____34xab____9xyz___77.5x_",
    "__3.5______.7xqr____81ab________",
    "________________________________",
    "____1_2xy_____4.25___60_pq______",
]
OPTIONS = {"ntil": {"noise_scale": 0.5}, "number_level": {"float_level": True}, "dist2": {"place_weighted": True}}
# The losses whose term reads where numbers start and end (place values, runs): a compaction that
# merges numbers across ignored stretches changes them. The other losses score each token alone.
READS_NUMBER_STRUCTURE = ("del", "dist2", "number_level", "ntil")
TOLERANCE = dict(rtol=1e-10, atol=1e-12)  # float64: the measured gaps are below 1e-14


def _labels() -> torch.Tensor:
    return torch.tensor([encode(text) for text in TEXTS])


def _model() -> torch.nn.Module:
    return tiny_causal_lm("qwen2", V, hidden=16, layers=1, heads=2, kv_heads=1, seed=0).double()


def _loss(name: str, noise: bool = True):
    """The loss with its options; NTIL's noise advances with each call: ``noise=False`` for a loss
    called more than once whose calls are compared."""
    options = OPTIONS.get(name, {})
    return build(name, **(options if noise or name != "ntil" else {**options, "noise_scale": 0.0}))


def _inputs(labels: torch.Tensor) -> dict:
    generator = torch.Generator().manual_seed(5)
    input_ids = torch.randint(0, V, labels.shape, generator=generator)
    attention_mask = torch.ones_like(labels)
    attention_mask[2, 8:] = 0  # a padded row
    return dict(input_ids=input_ids, targets=labels, attention_mask=attention_mask)


def _run(name: str, path: str, compact: bool, spans=None, scored=None) -> tuple[dict, dict]:
    """The objective's named outputs and every parameter's gradient, at the same weights."""
    labels = _labels()
    loss = _loss(name)
    loss.set_step(7)  # NTIL: the same noise stream in both runs
    objective = CausalLMObjective(_model(), loss, path, chunk_size=16, compact=compact)
    counts = dict(num_tokens=torch.tensor(60.0), num_digits=torch.tensor(30.0))
    out = objective(**_inputs(labels), **counts, spans=spans, scored=scored)
    out["loss"].backward()
    grads = {key: p.grad.clone() for key, p in objective.lm.named_parameters()}
    return {key: value.detach() for key, value in out.items()}, grads


def test_the_batch_is_mostly_ignored_with_numbers_across_ignored_stretches():
    labels = _labels()
    ignored = (labels == -100).float().mean().item()
    assert 0.6 < ignored < 0.8
    compacted = labels.reshape(-1)[scored_positions(labels)].view(1, -1)
    # Found after compaction, "12 .. 34" would be one number: fewer span starts.
    assert number_spans(compacted, VOCAB).span_start.sum() < number_spans(labels, VOCAB).span_start.sum()


def _host_batch() -> TokenBatch:
    """The labels as the trainer makes a batch: collated on the host, with spans and scored positions."""
    labels = _labels()
    inputs = _inputs(labels)
    batch = TokenBatch(inputs["input_ids"], labels, inputs["attention_mask"], torch.zeros_like(labels))
    return batch.with_spans(VOCAB).with_scored()


@pytest.mark.parametrize("given", [False, True], ids=["found", "given"])
@pytest.mark.parametrize("path", ["logits", "chunked"])
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_compacted_equals_full(name, path, given):
    """Positions found by the path on the targets, or given with the batch (the trainer's)."""
    full, full_grads = _run(name, path, compact=False)
    batch = _host_batch()
    scored = batch.scored if given else None
    compact, compact_grads = _run(name, path, compact=True, spans=number_spans(_labels(), VOCAB), scored=scored)
    assert full.keys() == compact.keys()
    for key in full:  # loss, ce, aux and the metrics
        torch.testing.assert_close(compact[key], full[key], **TOLERANCE, msg=key)
    assert full["n_tokens"].item() == (_labels() != -100).sum().item()
    assert full_grads.keys() == compact_grads.keys()
    for key in full_grads:
        assert full_grads[key].abs().max() > 0 or "bias" in key, key
        torch.testing.assert_close(compact_grads[key], full_grads[key], **TOLERANCE, msg=key)


@pytest.mark.parametrize("path", ["logits", "chunked"])
def test_a_micro_batch_with_nothing_scored_gives_zero_and_a_head_gradient(path):
    """No scored position (a micro-batch of prompts): [0, H] rows, loss 0, and the LM head still
    gets its (zero) gradient, as on the full path, so an engine waiting for it is not left waiting."""
    labels = torch.full_like(_labels(), -100)
    objective = CausalLMObjective(_model(), _loss("del"), path, chunk_size=16, compact=True)
    out = objective(**_inputs(labels), num_tokens=torch.tensor(5.0), num_digits=torch.tensor(3.0))
    out["loss"].backward()
    assert out["loss"].item() == 0.0 and out["n_tokens"].item() == 0.0
    head = objective.lm.get_output_embeddings().weight.grad
    assert head is not None and not head.any()


def _full_logits(model, labels) -> torch.Tensor:
    inputs = _inputs(labels)
    with torch.no_grad():
        return model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits


def _exact(loss, logits, labels):
    positions = scored_positions(labels)
    return loss(logits.reshape(-1, V).index_select(0, positions), labels, 60, 30, positions=positions)


def _merged_across_ignored(loss, logits, labels):
    """Broken: each row's scored positions moved together before the spans are found (padded with
    ignored positions at the end, rows kept), so numbers either side of an ignored stretch merge."""
    keep = labels != -100
    width = int(keep.sum(-1).max())
    packed_labels = torch.full((labels.shape[0], width), -100)
    packed_logits = torch.zeros(labels.shape[0], width, logits.shape[-1], dtype=logits.dtype)
    for row in range(labels.shape[0]):
        count = int(keep[row].sum())
        packed_labels[row, :count] = labels[row][keep[row]]
        packed_logits[row, :count] = logits[row][keep[row]]
    return loss(packed_logits, packed_labels, 60, 30)


def _shifted_by_one(loss, logits, labels):
    """Broken: the rows gathered one position after the scored ones (the targets' shift twice)."""
    positions = scored_positions(labels)
    rows = logits.reshape(-1, logits.shape[-1]).index_select(0, positions + 1)
    return loss(rows, labels, 60, 30, positions=positions)


def _loss_and_gradient(call, loss, logits, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss of ``call`` and its gradient with respect to the full logits [B, T, V] (NTIL's value
    is (1 + lambda) CE whatever its term: its term shows in the gradient)."""
    leaf = logits.detach().requires_grad_(True)
    out = call(loss, leaf, labels).loss
    out.backward()
    return out.detach(), leaf.grad


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_broken_compactions_differ(name):
    """The comparison can fail: both broken forms change the loss or its gradient (the merged
    numbers only for the losses that read the number structure; every other loss scores each token
    alone, so merging leaves it unchanged, which the exact form must match too)."""
    labels = _labels()
    logits = _full_logits(_model(), labels)
    loss = _loss(name, noise=False)
    want = _loss_and_gradient(lambda f, z, y: f(z, y, 60, 30), loss, logits, labels)

    def gap(got):
        return max((got[0] - want[0]).abs().item(), (got[1] - want[1]).abs().max().item())

    assert gap(_loss_and_gradient(_exact, loss, logits, labels)) < 1e-12
    merged = gap(_loss_and_gradient(_merged_across_ignored, loss, logits, labels))
    assert merged > 1e-4 if name in READS_NUMBER_STRUCTURE else merged < 1e-12, (name, merged)
    assert gap(_loss_and_gradient(_shifted_by_one, loss, logits, labels)) > 1e-4


@pytest.mark.parametrize("given", [False, True], ids=["found", "given"])
def test_a_compacted_call_syncs_once_for_the_gather_unless_given_the_positions(given):
    """The gather's size is the only host sync a compacted path adds: one ``nonzero`` per call when
    it finds the scored positions itself (the adapters), none when the caller hands them in (the
    trainer, from the host batch)."""
    batch = _host_batch()
    labels = batch.targets
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(*labels.shape, 8, generator=generator, requires_grad=True)
    weight = torch.randn(V, 8, generator=generator, requires_grad=True)
    loss = _loss("del")
    for name in ("logits", "chunked"):
        path = build_loss_path(name, chunk_size=5, compact=True)

        def call(path=path):
            out = path.score(
                LossCalls.of(loss),
                hidden,
                labels,
                60,
                30,
                head_weight=lambda: weight,
                head=lambda r: r @ weight.T,
                spans=batch.spans,
                positions=batch.scored if given else None,
            )
            out.loss.backward()

        call()  # warm-up: the digit ids cached on the device
        with count_host_syncs() as log:
            call()
        events = [(e.kind, e.origin.split(" ")[-1]) for e in log.from_package("/del_core/")]
        assert events == ([] if given else [("nonzero", "scored_positions")]), name


def test_the_host_batch_carries_its_scored_positions_while_its_shape_holds():
    """The positions index the batch's flat [B, T] targets: they move with the batch, and a batch
    padded or cut to another shape (sequence shards) drops them rather than keep stale ones."""
    batch = _host_batch()
    torch.testing.assert_close(batch.scored, scored_positions(batch.targets), rtol=0, atol=0)
    assert batch.scored.dtype == torch.int64 and batch.scored.numel() == int((batch.targets != -100).sum())
    moved = batch.to("cpu")
    torch.testing.assert_close(moved.scored, batch.scored, rtol=0, atol=0)
    assert shard_batch(batch, 0, 1, pad_id=0).scored is batch.scored
    wider = batch.targets.shape[1] + 3
    assert pad_batch(batch, wider, pad_id=0).scored is None
    assert shard_batch(batch, 1, 3, pad_id=0).scored is None
    assert TokenBatch(*(torch.zeros(1, 2, dtype=torch.long) for _ in range(4))).to("cpu").scored is None


def test_the_objective_takes_scored_positions_on_a_compacted_path_only():
    batch = _host_batch()
    objective = CausalLMObjective(_model(), _loss("del"), "logits")
    with pytest.raises(ValueError, match="compacted loss path only"):
        objective(batch.input_ids, batch.targets, scored=batch.scored)


class RecordingRun:
    """A :class:`del_core.losses.CausalLMRun` over fixed hidden states and head weight that records
    what a path asked it for."""

    def __init__(self, hidden, weight):
        self.hidden, self.weight, self.asked = hidden, weight, []

    def logits(self):
        self.asked.append("logits")
        return self.hidden @ self.weight.T

    def hidden_states(self):
        self.asked.append("hidden_states")
        return self.hidden

    def head_weight(self):
        self.asked.append("head_weight")
        return self.weight

    def head(self, rows):
        self.asked.append(f"head {tuple(rows.shape)}")
        return rows @ self.weight.T


@pytest.mark.parametrize("path", ["logits", "chunked"])
def test_a_compacted_path_asks_once_for_the_hidden_states_and_the_head(path):
    """The hidden states once, then the head module once on the [M, H] gathered rows (logits), or
    the head weight once for all the chunks (chunked: under ZeRO-3 one gather per micro-batch)."""
    labels = _labels()
    hidden = torch.randn(*labels.shape, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    weight = torch.randn(V, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    compacted = build_loss_path(path, chunk_size=3, compact=True)
    run = RecordingRun(hidden, weight)
    loss = _loss("del")
    got = compacted.score(
        LossCalls.of(loss), compacted.model_output(run), labels, 60, 30, head_weight=run.head_weight, head=run.head
    )
    scored = int((labels != -100).sum())
    assert run.asked == ["hidden_states", f"head {(scored, 8)}" if path == "logits" else "head_weight"]
    torch.testing.assert_close(got.loss, loss(hidden @ weight.T, labels, 60, 30).loss, **TOLERANCE)


def test_compaction_refuses_what_it_cannot_repeat():
    """The compacted logits path runs the head module (a bias is fine), not what the model's forward
    does after it (softcapping); the compacted chunked path keeps the chunked path's refusals."""
    model = tiny_causal_lm("qwen2", V)
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.weight.shape[0]))
    build_loss_path("logits", compact=True).check_model(model)
    with pytest.raises(ValueError, match="needs an LM head without bias"):
        build_loss_path("chunked", compact=True).check_model(model)
    model.config.final_logit_softcapping = 30.0
    softcapping = "compacted loss path: the model's final_logit_softcapping=30.0 .*loss.compact=false"
    with pytest.raises(ValueError, match=softcapping):
        build_loss_path("logits", compact=True).check_model(model)
    path = build_loss_path("chunked", chunk_size=9, compact=True)
    assert isinstance(path, CompactedPath) and path.name == "chunked" and path.reads_head_weight
    assert not build_loss_path("logits", compact=True).reads_head_weight
    with pytest.raises(ValueError, match="compacted once"):
        CompactedPath(path)


def test_the_training_key_is_off_by_default_and_refused_with_tensor_parallelism():
    assert load_train_config(None, []).loss.compact is False
    assert load_train_config(None, ["loss.compact=true"]).loss.compact is True
    with pytest.raises(ConfigError, match="loss.compact=true with parallel.tp=2 is not supported"):
        load_train_config(None, ["loss.compact=true", "parallel.tp=2"])
    load_train_config(None, ["loss.compact=false", "parallel.tp=2"])
    assert load_train_config(None, ["loss.compact=true", "parallel.sp=2"]).parallel.sp == 2
