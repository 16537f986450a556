"""The loss paths: one object per path (how the model runs, how the loss is scored) and their one name."""

import dataclasses
import warnings

import pytest
import torch

from del_core.losses import (
    LOSS_PATHS,
    ChunkedPath,
    LogitsPath,
    LossCalls,
    LossPath,
    build_loss,
    build_loss_path,
    loss_on_path,
    loss_path_name,
)
from helpers.tiny_models import tiny_causal_lm
from helpers.toy_vocab import VOCAB, H, V, make_batch


def test_the_paths_have_one_name_each():
    assert LOSS_PATHS == ("logits", "chunked")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [loss_path_name(p) for p in LOSS_PATHS] == list(LOSS_PATHS)
    with pytest.raises(ValueError, match="loss.path='dense': choose 'logits'"):
        loss_path_name("dense", "loss.path")


def test_the_0_1_spelling_is_refused_naming_the_paths():
    """Release 0.2 removed ``loss_path="hidden"`` (migration: ``"chunked"``)."""
    with pytest.raises(ValueError, match="loss_path='hidden': choose 'logits' .* or 'chunked'"):
        loss_path_name("hidden")
    assert [field.name for field in dataclasses.fields(LossCalls)] == list(LOSS_PATHS)  # one name per path


def test_logits_path_is_the_loss_call():
    loss_fn = build_loss("del", VOCAB)
    logits, labels = make_batch()
    got = loss_on_path("logits", LossCalls.of(loss_fn), logits, labels, 60, 30)
    want = loss_fn(logits, labels, 60, 30)
    assert got.loss.item() == want.loss.item() and got.metrics.keys() == want.metrics.keys()


def test_chunked_path_is_from_hidden():
    loss_fn = build_loss("del", VOCAB)
    _, labels = make_batch()
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(*labels.shape, H, generator=g, dtype=torch.float64)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64)
    got = loss_on_path("chunked", LossCalls.of(loss_fn), hidden, labels, head_weight=weight, chunk_size=5)
    want = loss_fn.from_hidden(hidden, weight, labels, chunk_size=5)
    dense = loss_fn(hidden @ weight.T, labels)
    assert got.loss.item() == want.loss.item()
    assert got.loss.item() == pytest.approx(dense.loss.item(), rel=1e-12)
    with pytest.raises(ValueError, match="needs the LM-head weight"):
        loss_on_path("chunked", LossCalls.of(loss_fn), hidden, labels)
    with pytest.raises(ValueError, match="unknown loss path 'hidden'"):
        loss_on_path("hidden", LossCalls.of(loss_fn), hidden, labels, head_weight=weight)


class RecordingRun:
    """A :class:`CausalLMRun` that records what a path asked it for."""

    def __init__(self, logits, hidden, weight):
        self._logits, self._hidden, self._weight, self.asked = logits, hidden, weight, []

    def logits(self):
        self.asked.append("logits")
        return self._logits

    def hidden_states(self):
        self.asked.append("hidden_states")
        return self._hidden

    def head_weight(self):
        self.asked.append("head_weight")
        return self._weight


def test_each_path_runs_the_model_for_what_it_scores_and_nothing_else():
    """The caller never branches: the path asks the run for its output (and the head weight when it
    scores against it), and scoring that output equals the loss's own call."""
    loss_fn = build_loss("del", VOCAB)
    _, labels = make_batch()
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(*labels.shape, H, generator=g, dtype=torch.float64)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64)
    logits = hidden @ weight.T
    calls = LossCalls.of(loss_fn)
    expected = {
        "logits": (["logits"], loss_fn(logits, labels, 60, 30)),
        "chunked": (
            ["hidden_states", "head_weight"],
            loss_fn.from_hidden(hidden, weight, labels, 60, 30, chunk_size=7),
        ),
    }
    for name in LOSS_PATHS:
        path = build_loss_path(name, chunk_size=7)
        assert isinstance(path, LossPath) and path.name == name
        assert path.reads_head_weight == (name == "chunked")
        run = RecordingRun(logits, hidden, weight)
        output = path.model_output(run)
        got = path.score(calls, output, labels, 60, 30, head_weight=run.head_weight)
        asked, want = expected[name]
        assert run.asked == asked
        assert got.loss.item() == want.loss.item()


def test_a_path_is_built_by_its_name_only():
    assert isinstance(build_loss_path("logits"), LogitsPath)
    chunked = build_loss_path("chunked", chunk_size=9, num_chunks=4)
    assert isinstance(chunked, ChunkedPath) and (chunked.chunk_size, chunked.num_chunks) == (9, 4)
    with pytest.raises(ValueError, match="loss.path='dense': choose 'logits'"):
        build_loss_path("dense", setting="loss.path")
    with pytest.raises(ValueError, match="chunk_size=0: must be >= 1"):
        build_loss_path("chunked", chunk_size=0)


def test_the_chunked_path_refuses_a_head_with_bias():
    model = tiny_causal_lm("qwen2", V)
    build_loss_path("chunked").check_model(model)
    build_loss_path("logits").check_model(model)
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.weight.shape[0]))
    with pytest.raises(ValueError, match="needs an LM head without bias"):
        build_loss_path("chunked").check_model(model)
    build_loss_path("logits").check_model(model)
