"""Use a del_core loss from your own Hugging Face ``Trainer`` or TRL ``SFTTrainer``.

    from del_core.integrations import DELTrainer            # transformers.Trainer
    from del_core.integrations import DELSFTTrainer         # trl.SFTTrainer (needs trl)

Both normalise every micro-batch loss by the token and digit counts of the whole optimizer step
over all data-parallel ranks (:mod:`del_core.integrations.hf_trainer`). ``DELSFTTrainer`` is
created on first access, so this package imports without trl. Nothing outside this package
imports the Trainer: ``del_core`` and ``del_core.losses`` import without it.
"""

from __future__ import annotations

from typing import Any

from del_core.integrations.counting import WindowCounts, aligned_targets, carried_spans, target_counts
from del_core.integrations.hf_trainer import DELTrainer, DELTrainerMixin
from del_core.integrations.setup_checks import UnsupportedSetupError

__all__ = [
    "DELSFTTrainer",
    "DELTrainer",
    "DELTrainerMixin",
    "UnsupportedSetupError",
    "WindowCounts",
    "aligned_targets",
    "carried_spans",
    "target_counts",
]


def __getattr__(name: str) -> Any:
    if name == "DELSFTTrainer":
        try:
            from del_core.integrations.trl_trainer import DELSFTTrainer
        except ImportError as error:
            raise ImportError(f"DELSFTTrainer needs TRL ({error}); install it with `pip install trl`") from error
        return DELSFTTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
