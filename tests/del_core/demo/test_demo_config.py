"""The loss demo's command line: ``key=value`` keys, the deprecated 0.1 flags read the same, and
a bad key or value is one ConfigError naming it."""

from __future__ import annotations

import warnings

import pytest

from del_core.config import ConfigError
from del_core.demo.loss_demo import DemoConfig, main, parse_args


def test_keys_as_key_value_and_the_deprecated_flags_give_one_configuration():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = parse_args(["model=DIR", "eval_problems=3", "steps=2", "batch_size=2", "lr=1e-4", "threads=1"])
    assert config == DemoConfig(model="DIR", eval_problems=3, steps=2, batch_size=2, lr=1e-4, threads=1)
    assert parse_args([]) == DemoConfig(None, 24, 12, 8, 2e-5, 0, None)
    old = ["--model", "DIR", "--eval-problems", "3", "--steps", "2", "--batch-size", "2", "--lr", "1e-4"]
    with pytest.warns(FutureWarning) as caught:
        assert parse_args([*old, "--threads", "1"]) == config
    assert str(caught[1].message) == (
        "the option '--eval-problems 3' is deprecated and will be removed in 0.4; use 'eval_problems=3'"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["step=2"], "unknown key 'step' (did you mean steps"),
        (["steps=-1"], "steps must be >= 0, got -1"),
        (["batch_size=0"], "batch_size must be >= 1, got 0"),
        (["lr=fast"], "lr"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_it(args, message, capsys):
    with pytest.raises(ConfigError) as caught:
        parse_args(args)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert main(args) == 2 and capsys.readouterr().err.strip() == f"error: {caught.value}"


def test_help_lists_the_keys(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name}=" in out for name in DemoConfig.__dataclass_fields__)
