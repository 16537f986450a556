"""``LossSpec``: the one loss set-up of the recipe and the Trainer adapter. It checks itself with
one-line errors naming the key as each way in writes it, normalises the name, builds the loss and
knows the placeholder lambda of "auto"."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from del_core.config import ConfigError
from del_core.integrations.loss_setup import ARGUMENT_KEYS, loss_spec
from del_core.losses import (
    AUTO_PLACEHOLDER,
    DEFAULT_AUTO_RATIO,
    DEL_DEFAULT_WEIGHT,
    LossSpec,
    LossSpecError,
    build_loss,
)
from del_core.training.config import LOSS_KEYS, LossConfig, TrainConfig, load_train_config
from helpers.toy_vocab import VOCAB, cost_embedding, make_batch


def test_the_defaults_and_the_normalised_name():
    spec = LossSpec()
    assert (spec.name, spec.weight, spec.auto_ratio, spec.options) == ("del", None, DEFAULT_AUTO_RATIO, {})
    assert LossSpec("NTL-WAS").name == "ntl_was" and LossSpec("Dist2", 0.2).name == "dist2"
    assert load_train_config(None, ["loss=NTL-WAS"]).loss.name == "ntl_was"


def test_the_weight_it_builds_with():
    assert LossSpec().initial_weight is None and LossSpec().build(VOCAB).weight == DEL_DEFAULT_WEIGHT
    assert LossSpec("del", 0.25).build(VOCAB).weight == 0.25
    auto = LossSpec("ntl_was", "auto", auto_ratio=0.3)
    assert auto.is_auto and auto.initial_weight == AUTO_PLACEHOLDER and auto.build(VOCAB).weight == AUTO_PLACEHOLDER
    assert not LossSpec("del", 0.1).is_auto and LossSpec("mle").build(None).weight == 0.0


def test_it_builds_the_loss_build_loss_builds():
    logits, labels = make_batch()
    spec = LossSpec("dist2", 0.2, options={"tau": 0.5, "place_weighted": True})
    got = spec.build(VOCAB)(logits, labels)
    want = build_loss("dist2", VOCAB, 0.2, tau=0.5, place_weighted=True)(logits, labels)
    assert got.loss.item() == want.loss.item() and got.aux.item() == want.aux.item()
    calls = []
    emo = LossSpec("emo").build(VOCAB, head_weight=lambda: calls.append(1) or cost_embedding())
    assert (
        calls == [1]
        and emo(logits, labels).loss.item()
        == build_loss("emo", VOCAB, cost_embedding=cost_embedding())(logits, labels).loss.item()
    )
    LossSpec("del").build(VOCAB, head_weight=lambda: calls.append(2))  # DEL needs no head weight: not called
    assert calls == [1]


# (fields, the message as LossSpec(...) writes it, as a recipe does, as DELTrainer's arguments do)
BAD = [
    (
        {"name": "dell"},
        "name must be one of mle, mixce, emo, ntl_was, ntl_mse, dist2, del, number_level, smmd, ntil, got 'dell'",
        "loss.name must be one of mle, mixce, emo, ntl_was, ntl_mse, dist2, del, number_level, smmd, ntil, got 'dell'",
        "loss must be one of mle, mixce, emo, ntl_was, ntl_mse, dist2, del, number_level, smmd, ntil, got 'dell'",
    ),
    (
        {"weight": "heavy"},
        "weight must be a number, 'auto' or None, got 'heavy'",
        "loss.weight must be a number, auto or empty, got 'heavy'",
        "loss_weight must be a number, 'auto' or None, got 'heavy'",
    ),
    (
        {"name": "mle", "weight": "auto"},
        "weight='auto': loss 'mle' has no weight lambda",
        "loss.weight=auto: loss mle has no weight lambda",
        "loss_weight='auto': loss 'mle' has no weight lambda",
    ),
    (
        {"name": "mixce", "weight": 0.1},
        "weight=0.1: loss 'mixce' has no weight lambda",
        "loss.weight=0.1: loss mixce has no weight lambda",
        "loss_weight=0.1: loss 'mixce' has no weight lambda",
    ),
    ({"weight": -1.0}, "weight must be >= 0, got -1.0", "loss.weight must be >= 0, got -1.0", None),
    ({"weight": float("inf")}, "weight must be a finite number, got inf", None, None),
    ({"weight": True}, "weight must be a number, 'auto' or None, got True", None, None),
    ({"auto_ratio": 0.0}, "auto_ratio must be > 0, got 0.0", "loss.auto_ratio must be > 0, got 0.0", None),
    (
        {"options": {"etta": 0.5}},
        "loss 'del' with options {'etta': 0.5}: ",
        "loss del with loss.options {'etta': 0.5}: ",
        "loss 'del' with loss_options {'etta': 0.5}: ",
    ),
    ({"name": "mixce", "options": {"eta": 2}}, "mixce: eta must lie in [0, 1], got 2", None, None),
]


@pytest.mark.parametrize("fields, as_fields, in_a_recipe, as_arguments", BAD)
def test_bad_values_are_one_line_errors_naming_the_key(fields, as_fields, in_a_recipe, as_arguments):
    with pytest.raises(LossSpecError) as caught:
        LossSpec(**fields)
    message = str(caught.value)
    assert as_fields in message and "\n" not in message
    if in_a_recipe is not None:
        assert in_a_recipe in str(caught.value.respelt(LOSS_KEYS))
        overrides = [f"loss.{key}={value}" for key, value in fields.items()]
        with pytest.raises(ConfigError) as from_recipe:
            load_train_config(None, [o.replace("'", "") for o in overrides])
        assert in_a_recipe in str(from_recipe.value)
    if as_arguments is not None:
        assert as_arguments in str(caught.value.respelt(ARGUMENT_KEYS))
        with pytest.raises(LossSpecError, match="^" + re.escape(as_arguments)):
            loss_spec(fields.get("name", "del"), fields.get("weight"), fields.get("options"), fields.get("auto_ratio"))


def test_the_recipe_section_is_the_record():
    """TrainConfig's loss section is a LossSpec plus the trainer's keys, in the order they had."""
    section = TrainConfig().loss
    assert isinstance(section, LossSpec) and isinstance(section, LossConfig)
    assert [f.name for f in dataclasses.fields(LossConfig)] == [
        "name",
        "weight",
        "auto_ratio",
        "options",
        "path",
        "chunk_size",
        "compile",
        "compile_backend",
        "compact",
    ]
    built = load_train_config(None, ["loss=dist2", "loss.weight=0.2", "loss.options={tau: 0.5}"]).loss.build(VOCAB)
    assert (built.name, built.weight, built.tau) == ("dist2", 0.2, 0.5)


def test_a_loss_spec_argument_carries_its_own_settings():
    spec = LossSpec("del", "auto")
    assert loss_spec(spec) is spec
    with pytest.raises(TypeError, match="loss is a LossSpec: give loss_weight"):
        loss_spec(spec, 0.1)
    with pytest.raises(TypeError, match="loss must be a loss name, a del_core LossSpec or a del_core NumericLoss"):
        loss_spec(torch.nn.Linear(1, 1))
