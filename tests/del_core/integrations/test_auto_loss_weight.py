"""``DELTrainer(loss_weight="auto")``: which values the adapter takes (the lambda itself is measured
on the first batch: tests/recipes/test_examples.py runs it)."""

from __future__ import annotations

import pytest

from del_core.integrations.example_cli import loss_weight_arg
from del_core.integrations.loss_setup import resolve_loss
from del_core.losses import AUTO_PLACEHOLDER, build_loss


def test_auto_builds_a_weighted_loss_whose_lambda_the_first_batch_sets(qwen2_tokenizer):
    chosen = resolve_loss("del", "auto", None, None, None, qwen2_tokenizer, None)
    assert chosen.loss.name == "del" and chosen.loss.weight == AUTO_PLACEHOLDER
    assert resolve_loss("ntl_was", 0.25, None, None, None, qwen2_tokenizer, None).loss.weight == 0.25
    assert [resolve_loss("del", weight, None, None, None, qwen2_tokenizer, None).spec.is_auto for weight in (
        "auto", None, 0.1)] == [True, False, False]  # fmt: skip


@pytest.mark.parametrize(
    "loss, weight, message",
    [
        ("mle", "auto", "loss_weight='auto': loss 'mle' has no weight lambda"),
        ("del", "heavy", "loss_weight must be a number, 'auto' or None, got 'heavy'"),
    ],
)
def test_what_auto_cannot_mean_is_refused(loss, weight, message, qwen2_tokenizer):
    with pytest.raises(ValueError, match=message):
        resolve_loss(loss, weight, None, None, None, qwen2_tokenizer, None)


def test_a_built_loss_carries_its_own_settings(qwen2_tokenizer):
    built = build_loss("mle", None)
    chosen = resolve_loss(built, None, None, None, None, qwen2_tokenizer, None)
    assert chosen.loss is built and chosen.spec is None
    with pytest.raises(TypeError, match="loss is a built NumericLoss: pass loss_weight"):
        resolve_loss(built, None, None, 0.1, None, qwen2_tokenizer, None)


def test_the_command_line_value():
    assert [loss_weight_arg(text) for text in ("auto", "1e-3", ".5", "2")] == ["auto", 0.001, 0.5, 2.0]
    with pytest.raises(ValueError):
        loss_weight_arg("heavy")
