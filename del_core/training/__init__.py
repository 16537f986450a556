"""The trainer (on DeepSpeed, FSDP2 or DDP: :mod:`del_core.engines`), its configuration and its parts.

Importing this package does not import DeepSpeed (only :mod:`del_core.engines.deepspeed` does, when a
DeepSpeed run starts).

    from del_core.training import Trainer, load_train_config
"""

from .config import TrainConfig, load_train_config
from .records import EvalRecord, FinalRecord, TrainRecord, read_metrics


def __getattr__(name: str):
    # The trainer pulls in transformers and the evaluation stack: load it on first use.
    if name in ("Trainer", "run"):
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(name)


__all__ = [
    "EvalRecord",
    "FinalRecord",
    "TrainConfig",
    "TrainRecord",
    "Trainer",
    "load_train_config",
    "read_metrics",
    "run",
]
