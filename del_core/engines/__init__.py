"""The training engines, one module each, and the only place del_core imports them:
:mod:`.deepspeed` (ZeRO-2/3, offload, AutoTP, Ulysses sequence parallelism), used by the
DeepSpeed trainer (:mod:`del_core.training`) and the Trainer adapter (:mod:`del_core.integrations`),
and :mod:`.fsdp2` (torch's ``fully_shard``; the trainer's ``parallel.engine=fsdp2``).
:class:`Engine` is what the trainer calls on either.

Importing this package, or its modules, does not import an engine: each imports its engine inside
the functions that run it.
"""

from .interface import Engine

__all__ = ["Engine"]
