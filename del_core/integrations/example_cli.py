"""The command line the Trainer examples share (``recipes/examples/hf_trainer.py`` and
``trl_sft.py``): their arguments, the loss set-up they give the Trainer, and the lines they print
about the loss (the lambda of ``--loss-weight auto`` is the measured one, printed after training).

    args = example_arguments(__doc__, "runs/hf-trainer-example")   # args.loss_spec: checked here
    trainer = DELTrainer(..., loss=args.loss_spec)
    print(loss_line(trainer)); trainer.train(); print_auto_weight(trainer)
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, Union

from del_core.losses import AUTO, LOSS_NAMES, KeySpelling, LossSpec, LossSpecError

# The LossSpec fields as the examples' options name them, for the spec's messages.
OPTION_KEYS = KeySpelling(renamed={"name": "--loss", "weight": "--loss-weight"}, literal=str, unset="no value")


def loss_weight_arg(text: str) -> Union[float, str]:
    """A ``--loss-weight`` value: ``auto``, or a number in any spelling Python reads (``0.1``,
    ``1e-3``, ``.5``); ValueError otherwise (argparse reports it as an invalid value)."""
    return text if text == AUTO else float(text)


def example_arguments(doc: str, output_dir: str, argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The examples' arguments: ``--model``, ``--loss``, ``--loss-weight``, ``--steps``,
    ``--output-dir`` (default ``output_dir``) and ``--deepspeed``, and ``loss_spec``, the
    :class:`del_core.losses.LossSpec` of ``--loss`` and ``--loss-weight`` (a bad pair is a one-line
    error naming the argument, before any model loads); ``doc``'s first line describes the script."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="HF directory or hub name; smollm2 = the offline default")
    parser.add_argument("--loss", default="del", help=" ".join(LOSS_NAMES))
    parser.add_argument(
        "--loss-weight",
        type=loss_weight_arg,
        default=None,
        help="lambda, or auto (from the first batch); default: the loss's own",
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--output-dir", default=output_dir)
    parser.add_argument("--deepspeed", default=None, help="a DeepSpeed JSON (ds_configs/zero3.json)")
    args = parser.parse_args(argv)
    try:
        args.loss_spec = LossSpec(args.loss, args.loss_weight)
    except LossSpecError as err:
        parser.error(str(err.respelt(OPTION_KEYS)))
    return args


def loss_line(trainer: Any) -> str:
    """``[del] loss del (lambda 0.128); digits: ...`` for a ``DELTrainer``: the lambda the loss trains
    with, or "auto, from the first batch" before it is measured."""
    loss, spec = trainer.del_loss, trainer.del_loss_spec
    pending = spec is not None and spec.is_auto and trainer.del_auto_weight is None
    weight = "auto, from the first batch" if pending else loss.weight
    digits = loss.vocab.describe() if loss.vocab is not None else "none"
    return f"[del] loss {loss.name} (lambda {weight}); digits: {digits}"


def print_auto_weight(trainer: Any) -> None:
    """After training with ``--loss-weight auto``: ``[del] lambda auto = <the measured lambda>``."""
    if trainer.del_auto_weight is not None:
        print(f"[del] lambda auto = {trainer.del_auto_weight.weight:.4g}")
