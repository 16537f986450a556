"""The one logits-or-chunked branch (``loss_on_path``) and the path's one name."""

import dataclasses
import warnings

import pytest
import torch

from del_core.losses import LOSS_PATHS, LossCalls, build_loss, loss_on_path, loss_path_name
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
