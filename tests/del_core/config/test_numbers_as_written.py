"""Every numeric key of every configuration reads every spelling YAML 1.2 and Python give its type,
in a recipe and on the command line (del_core.config.number_spellings), and the range checks run with the
configuration checks."""

from __future__ import annotations

import dataclasses
import typing
from decimal import Decimal
from typing import Any, Union

import pytest

from del_core.config import ConfigError, load_config
from del_core.config.number_spellings import NumberError, as_float, as_int, typed_numbers
from del_core.evaluation.benchmarks.config import EvalConfig
from del_core.experiments.numeric_bench.config import NumericBenchConfig
from del_core.experiments.study.config import StudyConfig
from del_core.training.config import TrainConfig, load_train_config

# EvalConfig needs a model or --score-only; nothing is read at configuration time.
NEEDED = {EvalConfig: ["score_only=pred.jsonl", "output=out.jsonl"]}
SCHEMAS = (TrainConfig, EvalConfig, NumericBenchConfig, StudyConfig)


def _scalar_kind(hint: Any) -> type | None:
    members = typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)
    return float if float in members else int if int in members and bool not in members else None


def numeric_keys(schema: type, prefix: str = "") -> list[tuple[str, type, Any]]:
    """(dotted key, int or float, a valid value) of every scalar numeric key of ``schema``: its
    default, or 1 where the default is None (a count or a size: 1 is valid for every such key)."""
    keys = []
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        if field.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(field.default_factory):
            keys += numeric_keys(field.default_factory, f"{prefix}{field.name}.")
            continue
        kind = _scalar_kind(hints[field.name])
        if kind is not None:
            value = field.default if field.default is not None else kind(1)
            keys.append((f"{prefix}{field.name}", kind, value))
    return keys


def spellings(kind: type, value: float) -> set[str]:
    """Ways to write ``value`` for a key of type ``kind``, the YAML 1.1 text forms among them."""
    if kind is int:
        return {str(value), f"+{value}", f"{value:_}"}
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    mantissa = int("".join(map(str, digits)))
    forms = {repr(value), f"{mantissa}e{exponent}", f"{mantissa}E{exponent}", f"{value:.6e}"}
    if repr(value).startswith("0."):
        forms.add(repr(value)[1:])  # .5
    if value == int(value):
        forms |= {str(int(value)), f"{int(value)}."}  # 1 and 1. for a float key
    return forms


CASES = [
    pytest.param(schema, key, kind, value, id=f"{schema.__name__}.{key}")
    for schema in SCHEMAS
    for key, kind, value in numeric_keys(schema)
]


def test_every_schema_has_numeric_keys():
    counts = {schema.__name__: len(numeric_keys(schema)) for schema in SCHEMAS}
    assert all(count >= 5 for count in counts.values()), counts
    assert ("loss.weight", float, 1.0) in numeric_keys(TrainConfig)


@pytest.mark.parametrize("schema, key, kind, value", CASES)
def test_every_spelling_on_the_command_line_and_in_a_recipe(schema, key, kind, value, tmp_path):
    *section, name = key.split(".")
    for text in sorted(spellings(kind, value)):
        loaded = load_config(schema, overrides=[*NEEDED.get(schema, []), f"{key}={text}"])
        got = getattr(getattr(loaded, section[0]) if section else loaded, name)
        assert type(got) is kind and got == value, (key, text, got)
        recipe = tmp_path / "recipe.yaml"
        line = f"{name}: {text}"
        recipe.write_text(f"{section[0]}:\n  {line}\n" if section else f"{line}\n")
        loaded = load_config(schema, recipe, NEEDED.get(schema, []))
        got = getattr(getattr(loaded, section[0]) if section else loaded, name)
        assert type(got) is kind and got == value, (key, text, "recipe", got)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("loss.weight=1", 1.0),  # today: "type hint Optional[Union[float, str]]"
        ("loss.weight=1e-3", 0.001),  # today: "must be a number, auto or empty, got '1e-3'"
        ("loss.weight=.5", 0.5),
        ("loss.weight=1E-3", 0.001),
        ("loss.weight=+2e+0", 2.0),
        ("loss.weight=1_000", 1000.0),
        ("loss.weight=auto", "auto"),
        ("loss.weight=", None),
    ],
)
def test_loss_weight_spellings(override, expected):
    weight = load_train_config(None, [override]).loss.weight
    assert weight == expected and type(weight) is type(expected)


def test_lists_mappings_and_free_options_read_their_numbers(tmp_path):
    recipe = tmp_path / "train.yaml"
    recipe.write_text("loss:\n  weight: 1e-3\n  options: {tau: 5e-1}\noptimizer:\n  betas: [0.9, 1e-3]\n  lr: 2e-5\n")
    config = load_train_config(recipe, ["loss=dist2"])
    assert (config.loss.weight, config.loss.options, config.optimizer.betas) == (0.001, {"tau": 0.5}, [0.9, 0.001])
    assert load_train_config(None, ["optimizer.betas=0.9,1e-3"]).optimizer.betas == [0.9, 0.001]
    bench = tmp_path / "bench.yaml"
    bench.write_text("grids:\n  del: [8e-3, 3.2e-2, 1]\nseeds: [0, 1_0]\nlr: 3e-3\n")
    config = load_config(NumericBenchConfig, bench)
    assert (config.grids["del"], config.seeds, config.lr) == ([0.008, 0.032, 1.0], [0, 10], 0.003)
    study = tmp_path / "study.yaml"
    study.write_text("loss_weights: {del: 1e-3, ntl_was: auto}\nauto_ratios: {del: 2e-2}\nprogram_share: 5e-1\n")
    config = load_config(StudyConfig, study)
    assert (config.loss_weights, config.auto_ratios, config.program_share) == (
        {"del": 0.001, "ntl_was": "auto"},
        {"del": 0.02},
        0.5,
    )


@pytest.mark.parametrize(
    "override, message",
    [
        ("run.max_steps=1e3", "run.max_steps must be an integer, got '1e3'"),  # an int key: no rounding
        ("run.max_steps=2.0", "run.max_steps must be an integer, got 2.0"),
        ("run.max_steps=true", "run.max_steps must be an integer, got the boolean True"),
        ("optimizer.lr=nan", "optimizer.lr must be a number, got 'nan'"),  # text, not YAML's .nan
        ("optimizer.lr=.inf", "optimizer.lr must be a finite number, got inf"),
        ("optimizer.lr=fast", "optimizer.lr must be a number, got 'fast'"),
        ("loss.weight=heavy", "loss.weight must be a number, auto or empty, got 'heavy'"),
        ("optimizer.betas=0.9,x", "optimizer.betas must be a number, got 'x'"),
    ],
)
def test_what_is_no_number_is_named(override, message):
    with pytest.raises(ConfigError, match=f"^command line: {message}$|^{message}$"):
        load_train_config(None, [override])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["loss.weight=-1.0"], "loss.weight must be >= 0, got -1.0"),  # today: after the model loaded
        (["loss.weight=-1e-3"], "loss.weight must be >= 0, got -0.001"),
        (["loss=mle", "loss.weight=0.1"], "loss.weight=0.1: loss mle has no weight lambda"),
        (["loss.auto_ratio=0"], "loss.auto_ratio must be > 0, got 0.0"),
        (["optimizer.lr=-1e-4"], "need optimizer.lr > 0"),
        (["run.micro_batch_size=0"], "run.micro_batch_size must be >= 1, got 0"),
        (["loss.chunk_size=0"], "loss.chunk_size must be >= 1, got 0"),
        (["data.max_length=0"], "data.max_length must be >= 1, got 0"),
        (["loss=mixce", "loss.options={eta: 2}"], "mixce: eta must lie in [0, 1], got 2"),  # the loss's own check
        (["loss=dist2", "loss.options={tau: -1e-1}"], "dist2: tau must be > 0, got -0.1"),
        (["loss.options={etta: 0.5}"], "loss del with loss.options {'etta': 0.5}: "),
    ],
)
def test_range_checks_run_with_the_configuration_checks(overrides, message):
    with pytest.raises(ConfigError) as caught:
        load_train_config(None, overrides)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_number_rules():
    assert [as_float(text) for text in ("1", "1e-3", ".5", "5.", "1_000.5", "-2E+2")] == [1, 1e-3, 0.5, 5, 1000.5, -200]
    assert [as_int(text) for text in ("7", "+7", "1_000", 12)] == [7, 7, 1000, 12]
    for bad in ("1e3", "1.0", 1.5, True, "0x"):
        with pytest.raises(NumberError):
            as_int(bad)
    for bad in ("nan", float("inf"), "1e", "e3", False, "1,5"):
        with pytest.raises(NumberError):
            as_float(bad)
    assert typed_numbers(typing.Optional[typing.Union[float, str]], "auto") == "auto"
    assert typed_numbers(dict[str, Any], {"eta": "1e-3", "mode": "off", "n": "12"}) == {
        "eta": 0.001,
        "mode": "off",
        "n": "12",  # quoted digits in a free mapping stay text
    }
