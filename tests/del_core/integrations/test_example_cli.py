"""The Trainer examples' command line (del_core.integrations.example_cli): ``key=value`` like every
entry script, the 0.2 flags read with a deprecation warning, errors as one line before any model."""

from __future__ import annotations

import pytest

from del_core.integrations.example_cli import example_arguments
from del_core.losses import LossSpec


def test_keys_set_the_model_the_loss_section_and_the_run():
    config = example_arguments("doc", "runs/default", ["model=DIR", "loss=dist2", "loss.weight=auto", "steps=3"])
    assert (config.model, config.steps, config.output_dir, config.deepspeed) == ("DIR", 3, "runs/default", None)
    assert config.loss_spec == LossSpec("dist2", "auto")
    assert example_arguments("doc", "runs/default", ["loss=dist2", "loss.options={tau: 2.0}"]).loss_spec.options == {
        "tau": 2.0
    }


def test_the_0_2_flags_still_work_and_name_their_keys():
    flags = ["--model", "DIR", "--loss", "ntl_was", "--loss-weight", "0.5", "--steps", "2", "--output-dir", "out"]
    with pytest.warns(FutureWarning) as caught:
        config = example_arguments("doc", "runs/default", flags)
    assert config.loss_spec == LossSpec("ntl_was", 0.5) and (config.steps, config.output_dir) == (2, "out")
    messages = [str(warning.message) for warning in caught]
    assert "the option '--loss-weight 0.5' is deprecated and will be removed in 0.5; use 'loss.weight=0.5'" in messages
    assert len(messages) == 5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["loss=mle", "loss.weight=auto"], "error: loss.weight=auto: loss mle has no weight lambda"),
        (["loss.weight=heavy"], "error: loss.weight must be a number, auto or empty, got 'heavy'"),
        (["loss=entropy"], "error: loss.name must be one of mle, mixce, emo,"),
        (["step=3"], "error: command line: unknown key 'step' (did you mean steps?)"),
    ],
)
def test_bad_keys_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        example_arguments("doc", "runs/default", argv)
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(message), err


def test_help_lists_the_keys(capsys):
    with pytest.raises(SystemExit) as stopped:
        example_arguments("The first line.", "runs/default", ["--help"])
    out = capsys.readouterr().out
    assert stopped.value.code == 0 and out.startswith("The first line.")
    assert all(
        f"\n  {key}=" in out for key in ("model", "loss.name", "loss.weight", "steps", "output_dir", "deepspeed")
    )
