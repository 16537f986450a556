"""loss.weight=auto in a run: the lambda kept in OUTPUT_DIR for a resume, the errors of a run that
cannot set it, and the configuration checks."""

from __future__ import annotations

import json

import pytest

from del_core.config import ConfigError
from del_core.losses import AutoWeight
from del_core.training.config import load_train_config
from del_core.training.loss_weight import AUTO_WEIGHT_FILE, load_auto_weight, run_auto_weight, save_auto_weight


def test_the_chosen_weight_survives_for_a_resume(tmp_path):
    chosen = AutoWeight.measure(0.5, 20.0, 0.02)
    assert chosen.weight == pytest.approx(5e-4)
    save_auto_weight(chosen, tmp_path)
    assert json.loads((tmp_path / AUTO_WEIGHT_FILE).read_text())["unit_term"] == 20.0
    assert load_auto_weight(tmp_path) == chosen
    assert "x40 the CE" in chosen.describe("del")
    with pytest.raises(ConfigError, match="auto_loss_weight.json .the lambda chosen at step 0. is missing"):
        load_auto_weight(tmp_path / "elsewhere")
    (tmp_path / AUTO_WEIGHT_FILE).write_text("{")
    with pytest.raises(ConfigError, match="is unreadable"):
        load_auto_weight(tmp_path)
    with pytest.raises(ConfigError, match="loss.weight=auto: auto weight: the first batch gives CE"):
        run_auto_weight(lambda: AutoWeight.measure(0.5, 0.0, 0.02), tmp_path, 0, True)


def test_step_0_measures_and_saves_a_resume_loads(tmp_path):
    chosen = AutoWeight.measure(0.5, 20.0, 0.02)
    assert run_auto_weight(lambda: chosen, tmp_path, 0, is_main=False) == chosen
    assert not (tmp_path / AUTO_WEIGHT_FILE).exists()  # only the main rank writes
    assert run_auto_weight(lambda: chosen, tmp_path, 0, is_main=True) == chosen

    def never() -> AutoWeight:
        raise AssertionError("a resume does not measure")

    assert run_auto_weight(never, tmp_path, 3, is_main=True) == chosen


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
    assert load_train_config(None, ["loss.weight=auto"]).loss.is_auto
    config = load_train_config(None, ["loss.weight=0.01"])
    assert config.loss.weight == 0.01 and not config.loss.is_auto
