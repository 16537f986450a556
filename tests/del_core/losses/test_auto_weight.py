"""loss.weight=auto: the rule (lambda = ratio x CE / digit term), its errors, the record a run keeps
for resuming, and the configuration checks."""

from __future__ import annotations

import json
import math

import pytest

from del_core.config import ConfigError
from del_core.losses import DEFAULT_AUTO_RATIO, auto_weight
from del_core.training.config import load_train_config
from del_core.training.loss_weight import AUTO_WEIGHT_FILE, AutoWeight


def test_auto_weight_makes_the_weighted_term_the_ratio_of_ce():
    # SmolLM2-135M at the start of the main job: CE 0.6669, DEL term 19.6403 -> 0.02 x 0.6669 / 19.6403
    assert auto_weight(0.6669, 19.6403) == pytest.approx(6.7911e-4, rel=1e-4)
    assert DEFAULT_AUTO_RATIO == 0.02
    assert auto_weight(2.0, 0.5, ratio=0.1) * 0.5 == pytest.approx(0.1 * 2.0)


@pytest.mark.parametrize("ce, term", [(1.0, 0.0), (0.0, 1.0), (1.0, math.nan), (math.inf, 1.0)])
def test_auto_weight_refuses_a_batch_that_cannot_set_it(ce, term):
    with pytest.raises(ValueError, match="a batch without digit positions cannot set lambda"):
        auto_weight(ce, term)


def test_the_chosen_weight_survives_for_a_resume(tmp_path):
    chosen = AutoWeight.measure(0.5, 20.0, 0.02)
    assert chosen.weight == pytest.approx(5e-4)
    chosen.save(tmp_path)
    assert json.loads((tmp_path / AUTO_WEIGHT_FILE).read_text())["unit_term"] == 20.0
    assert AutoWeight.load(tmp_path) == chosen
    assert "x40 the CE" in chosen.describe("del")
    with pytest.raises(ConfigError, match="auto_loss_weight.json .the lambda chosen at step 0. is missing"):
        AutoWeight.load(tmp_path / "elsewhere")
    (tmp_path / AUTO_WEIGHT_FILE).write_text("{")
    with pytest.raises(ConfigError, match="is unreadable"):
        AutoWeight.load(tmp_path)
    with pytest.raises(ConfigError, match="loss.weight=auto: auto weight: the first batch gives CE"):
        AutoWeight.measure(0.5, 0.0, 0.02)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["loss.weight=often"], "loss.weight must be a number, auto or empty, got 'often'"),
        (["loss=mixce", "loss.weight=auto"], "loss.weight=auto: loss mixce has no weight lambda"),
        (["loss.weight=auto", "loss.auto_ratio=0"], "loss.auto_ratio must be > 0"),
    ],
)
def test_bad_auto_settings_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config(None, overrides)


def test_auto_and_numbers_both_load():
    assert load_train_config(None, ["loss.weight=auto"]).loss.auto_weight
    config = load_train_config(None, ["loss.weight=0.01"])
    assert config.loss.weight == 0.01 and not config.loss.auto_weight
