"""The command line the Trainer examples share (``recipes/examples/hf_trainer.py`` and
``trl_sft.py``): their keys, the loss set-up they give the Trainer, and the lines they print
about the loss (the lambda of ``loss.weight=auto`` is the measured one, printed after training).

    args = example_arguments(__doc__, "runs/hf-trainer-example")   # args.loss: a checked LossSpec
    trainer = DELTrainer(..., loss=args.loss_spec)
    print(loss_line(trainer)); trainer.train(); print_auto_weight(trainer)

The keys are ``key=value`` as in every entry script (:mod:`del_core.config`): ``model=DIR
loss=dist2 loss.weight=auto steps=4``. The 0.2 flags (``--model``, ``--loss``, ``--loss-weight``,
``--steps``, ``--output-dir``, ``--deepspeed``) still work until 0.5, with a deprecation warning.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from del_core.config import (
    HELP_FLAGS,
    REMOVED_IN_NEXT,
    ConfigError,
    KeyAliases,
    keys_help,
    load_config,
    option,
    split_command_line,
)
from del_core.losses import AUTO, DOTTED_SPELLING, LossSpec, LossSpecError

# The 0.2 flag ``--loss-weight`` is the loss section's ``weight``.
RENAMED_FLAGS = {"loss_weight": "loss.weight"}
EXAMPLE_ALIASES = KeyAliases(shorthands={"loss": "name"})


def loss_weight_arg(text: str) -> float | str:
    """A lambda as a person writes it: ``auto``, or a number in any spelling Python reads (``0.1``,
    ``1e-3``, ``.5``); ValueError otherwise."""
    return text if text == AUTO else float(text)


@dataclass
class ExampleLoss(LossSpec):
    """The examples' ``loss`` section: a :class:`LossSpec` whose errors name the dotted keys."""

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except LossSpecError as err:
            raise ConfigError(str(err.respelt(DOTTED_SPELLING))) from None


@dataclass
class ExampleConfig:
    """What an example runs: ``model``, the ``loss`` section (``loss=NAME``, ``loss.weight``,
    ``loss.auto_ratio``, ``loss.options``), ``steps``, ``output_dir`` and ``deepspeed``."""

    model: str = option("smollm2", "a Hugging Face directory or hub name; smollm2 = the offline default")
    loss: ExampleLoss = field(default_factory=ExampleLoss)
    steps: int = option(10, "optimizer steps")
    output_dir: str = option("", "where the Trainer writes; default: the example's own folder under runs/")
    deepspeed: Optional[str] = option(None, "a DeepSpeed JSON, e.g. ds_configs/zero3.json", "FILE")

    @property
    def loss_spec(self) -> LossSpec:
        """The loss set-up as the Trainer adapters take it."""
        return LossSpec(self.loss.name, self.loss.weight, self.loss.auto_ratio, dict(self.loss.options))


def example_arguments(doc: str, output_dir: str, argv: Optional[Sequence[str]] = None) -> ExampleConfig:
    """The example's :class:`ExampleConfig` from ``argv`` (default ``sys.argv[1:]``), ``output_dir``
    when none is given. ``--help`` prints ``doc`` and the keys and exits 0; a bad key or loss set-up
    is a one-line ``error: ...`` on stderr and exit status 2, before any model loads."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in HELP_FLAGS:
        print(f"{doc}\nKeys (key=value, defaults shown):\n{keys_help(ExampleConfig)}")
        sys.exit(0)
    try:
        recipe, overrides = split_command_line(argv, renamed=RENAMED_FLAGS, removed_in=REMOVED_IN_NEXT)
        config = load_config(ExampleConfig, recipe, overrides, aliases=EXAMPLE_ALIASES)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    config.output_dir = config.output_dir or output_dir
    return config


def loss_line(trainer: Any) -> str:
    """``[del] loss del (lambda 0.128); digits: ...`` for a ``DELTrainer``: the lambda the loss trains
    with, or "auto, from the first batch" before it is measured."""
    loss, spec = trainer.del_loss, trainer.del_loss_spec
    pending = spec is not None and spec.is_auto and trainer.del_auto_weight is None
    weight = "auto, from the first batch" if pending else loss.weight
    digits = loss.vocab.describe() if loss.vocab is not None else "none"
    return f"[del] loss {loss.name} (lambda {weight}); digits: {digits}"


def print_auto_weight(trainer: Any) -> None:
    """After training with ``loss.weight=auto``: ``[del] lambda auto = <the measured lambda>``."""
    if trainer.del_auto_weight is not None:
        print(f"[del] lambda auto = {trainer.del_auto_weight.weight:.4g}")
