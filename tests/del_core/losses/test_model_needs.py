"""The loss hook: what a loss needs from the model and tokenizer (``LossNeeds``) is declared by its
class and supplied by ``build_loss_for_model``; tensor-parallel shards through ``for_vocab_slice``."""

import contextlib

import pytest
import torch

from del_core.losses import LOSS_NAMES, build_loss, build_loss_for_model, head_weight_copy, loss_class, loss_needs
from del_core.losses.statistics import VocabSlice
from helpers.toy_vocab import VOCAB, H, V, make_batch

DIGIT_LOSSES = ("ntl_was", "ntl_mse", "dist2", "del", "number_level", "smmd", "ntil")


def head(seed: int = 3) -> torch.nn.Linear:
    """A toy LM head [V, H] in float64."""
    torch.manual_seed(seed)
    return torch.nn.Linear(H, V, bias=False, dtype=torch.float64)


def hidden_batch(seed: int = 4):
    _, labels = make_batch()
    hidden = torch.randn(*labels.shape, H, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return hidden, labels


class Calls:
    """A head-weight provider that counts its calls."""

    def __init__(self, weight: torch.Tensor):
        self.weight, self.count = weight, 0

    def __call__(self) -> torch.Tensor:
        self.count += 1
        return self.weight.detach().clone()


def test_the_needs_are_declared_by_the_loss_classes():
    assert {name for name in LOSS_NAMES if loss_needs(name).vocab} == set(DIGIT_LOSSES)
    assert {name: loss_needs(name).head_weight_as for name in LOSS_NAMES if loss_needs(name).head_weight_as} == {
        "emo": "cost_embedding"
    }
    assert loss_needs("NTL-WAS") == loss_class("ntl_was").needs
    with pytest.raises(ValueError, match="unknown loss 'foo'"):
        loss_needs("foo")


def test_emo_through_the_hook_equals_emo_built_by_hand():
    """Loss values and gradients (from logits and from hidden states) are the same to the bit."""
    lm_head = head()
    hooked = build_loss_for_model("emo", VOCAB, head_weight=lambda: lm_head.weight)
    by_hand = build_loss("emo", VOCAB, cost_embedding=lm_head.weight.detach().clone())
    assert torch.equal(hooked.cost_embedding, by_hand.cost_embedding)
    logits, labels = make_batch(scale=1.0)
    grads = []
    for loss_fn in (hooked, by_hand):
        z = logits.clone().requires_grad_(True)
        out = loss_fn(z, labels)
        out.loss.backward()
        grads.append((out.loss.item(), out.aux.item(), z.grad))
    assert grads[0][:2] == grads[1][:2] and torch.equal(grads[0][2], grads[1][2])
    hidden, labels = hidden_batch()
    results = []
    for loss_fn in (hooked, by_hand):
        h = hidden.clone().requires_grad_(True)
        w = lm_head.weight.detach().clone().requires_grad_(True)
        out = loss_fn.from_hidden(h, w, labels, chunk_size=7)
        out.loss.backward()
        results.append((out.loss.item(), h.grad, w.grad))
    assert results[0][0] == results[1][0]
    assert torch.equal(results[0][1], results[1][1]) and torch.equal(results[0][2], results[1][2])


def test_the_cost_embedding_is_a_frozen_copy():
    lm_head = head()
    loss_fn = build_loss_for_model("emo", VOCAB, head_weight=lambda: lm_head.weight)
    before = loss_fn.cost_embedding.clone()
    with torch.no_grad():
        lm_head.weight.add_(1.0)
    assert torch.equal(loss_fn.cost_embedding, before) and not loss_fn.cost_embedding.requires_grad


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_the_head_weight_is_read_only_by_a_loss_that_needs_it(name):
    provider = Calls(head().weight)
    loss_fn = build_loss_for_model(name, VOCAB, head_weight=provider)
    assert provider.count == (1 if name == "emo" else 0)
    assert type(loss_fn) is loss_class(name)
    given = Calls(head().weight)
    build_loss_for_model("emo", VOCAB, head_weight=given, cost_embedding=head(5).weight.detach())
    assert given.count == 0  # an explicit option wins


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_options_and_weight_pass_through(name):
    weight = 0.25 if name in DIGIT_LOSSES else None
    hooked = build_loss_for_model(name, VOCAB, weight, head_weight=Calls(head().weight), validate="sync")
    assert hooked.validate == "sync" and (weight is None or hooked.weight == weight)


def test_a_loss_that_needs_a_vocabulary_without_one_raises_before_reading_the_head():
    provider = Calls(head().weight)
    for name in DIGIT_LOSSES:
        with pytest.raises(ValueError, match=f"loss '{name}' needs a DigitVocab"):
            build_loss_for_model(name, None, head_weight=provider)
    assert provider.count == 0
    for name in ("mle", "mixce", "emo"):
        out = build_loss_for_model(name, None, head_weight=provider)(*make_batch())
        assert "digit_acc" not in out.metrics  # no vocabulary: no digit metrics


def test_a_loss_that_needs_the_head_without_a_provider_raises():
    with pytest.raises(TypeError, match="loss 'emo' needs the LM-head weight: pass head_weight="):
        build_loss_for_model("emo", VOCAB)


@pytest.mark.parametrize("start, end", [(0, V), (0, 20), (20, 41), (41, V)])
def test_the_emo_shard_keeps_exactly_the_slice_rows(start, end):
    weight = head().weight.detach()
    full = build_loss_for_model("emo", VOCAB, head_weight=lambda: weight)
    shard = full.for_vocab_slice(VocabSlice(start, end, V))
    assert shard is not full and type(shard) is type(full)
    assert torch.equal(shard.cost_embedding, full.cost_embedding[start:end])
    # Normalising rows is row by row: the slice of the normalised copy is the normalised slice.
    assert torch.equal(shard.cost_embedding, build_loss("emo", VOCAB, cost_embedding=weight[start:end]).cost_embedding)
    assert full.cost_embedding.shape == (V, H)  # the full loss is left as it was
    assert (shard.vocab, shard.validate, shard.weight) == (full.vocab, full.validate, full.weight)


def test_the_whole_vocabulary_shard_computes_the_same_loss():
    weight = head().weight.detach()
    full = build_loss_for_model("emo", VOCAB, head_weight=lambda: weight)
    shard = full.for_vocab_slice(VocabSlice.full(V))
    logits, labels = make_batch()
    assert full(logits, labels).loss.item() == shard(logits, labels).loss.item()
    with pytest.raises(ValueError, match="slice a full-vocabulary loss"):
        shard.for_vocab_slice(VocabSlice(0, 10, V)).for_vocab_slice(VocabSlice(0, 5, V))


@pytest.mark.parametrize("name", [n for n in LOSS_NAMES if n != "emo"])
def test_losses_without_per_token_rows_are_their_own_shard(name):
    loss_fn = build_loss(name, VOCAB)
    assert loss_fn.for_vocab_slice(VocabSlice(0, 20, V)) is loss_fn


def test_the_0_1_needs_vocab_spelling_is_gone():
    """Release 0.2 removed ``needs_vocab`` (declare ``needs = LossNeeds(vocab=True)``, read ``needs.vocab``)."""
    from del_core.losses import NumericLoss

    assert not hasattr(NumericLoss, "needs_vocab") and not hasattr(build_loss("del", VOCAB), "needs_vocab")


class _Head(torch.nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=weight.dtype)
        self.head.weight.data.copy_(weight)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head


def test_head_weight_copy_is_a_detached_copy_made_inside_the_gathering():
    """The one LM-head copy of both trainers: the values (bit-equal), not the parameter; made
    inside ``gathered`` (the DeepSpeed trainer's ZeRO-3 gathering), where a partitioned weight holds them."""
    weight = head().weight.detach()
    model = _Head(weight)
    entered = []

    @contextlib.contextmanager
    def gathered(params):
        entered.append(params[0] is model.head.weight)
        yield

    copy = head_weight_copy(model, torch.device("cpu"), gathered)
    assert entered == [True] and torch.equal(copy, weight) and copy.dtype == torch.float64
    assert not copy.requires_grad and copy.data_ptr() != model.head.weight.data_ptr()
    model.head.weight.data.zero_()  # the copy outlives the parameter's values (ZeRO-3 frees them)
    assert torch.equal(copy, weight)


def test_a_partitioned_head_weight_is_refused_naming_the_loss():
    model = _Head(head().weight.detach())
    model.head.weight.data = torch.empty(0, dtype=torch.float64)  # what ZeRO-3 leaves outside a forward
    with pytest.raises(ValueError, match="loss 'emo' needs the LM-head weight as cost_embedding: .* partitioned"):
        build_loss_for_model("emo", VOCAB, head_weight=lambda: head_weight_copy(model))
