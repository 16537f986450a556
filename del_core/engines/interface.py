"""What the trainer calls on an engine, whichever it is: DeepSpeed's ``DeepSpeedEngine`` has these
methods under these names, and :class:`del_core.engines.fsdp2.FSDP2Engine` implements them."""

from __future__ import annotations

from typing import Any, Optional, Protocol, Union

import torch


class Engine(Protocol):
    """The engine surface of :class:`del_core.training.trainer.Trainer` and its checkpoints.

    Per micro-batch: ``engine(**inputs)`` runs the objective, ``backward(loss,
    scale_wrt_gas=False)`` its backward (the loss already scaled by the trainer), ``step()``
    counts the micro-batch and, after the optimizer step's last one, steps the optimizer and the
    LR schedule. ``save_checkpoint`` / ``load_checkpoint`` write and read ``dir/tag`` (collective).
    """

    def __call__(self, **inputs: Any) -> dict[str, torch.Tensor]: ...

    def backward(self, loss: torch.Tensor, scale_wrt_gas: bool = ...) -> Any: ...

    def step(self) -> None: ...

    def get_global_grad_norm(self) -> Union[torch.Tensor, float, None]: ...

    def save_checkpoint(
        self, save_dir: str, tag: str, save_latest: bool = ..., exclude_frozen_parameters: bool = ...
    ) -> Any: ...

    def load_checkpoint(self, load_dir: str, tag: str, load_module_strict: bool = ...) -> tuple[Optional[str], Any]: ...
