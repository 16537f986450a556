"""The training engines and the only place del_core imports them. Each engine is a
:class:`Backend` - its whole life in a run, from the process group to the exported weights - in a
module or package of its own: :mod:`.deepspeed` (ZeRO-2/3, offload, AutoTP, Ulysses; also the
glue the Trainer adapter of :mod:`del_core.integrations` uses) and :mod:`.fsdp2` (torch's
``fully_shard``). :mod:`.registry` maps ``parallel.engine`` to the backend; :class:`Engine` is
what the trainer drives per micro-batch. Shared by the engines: :mod:`.settings` (the recipe's
``parallel`` and ``optimizer`` sections), :mod:`.runtime` (device and precision),
:mod:`.optimizer` (torch AdamW over parameter groups).

Importing this package, or its modules, does not import an engine library: each engine imports
it inside the functions that run it. Nothing here imports :mod:`del_core.training`.
"""

from .interface import Backend, BatchShape, BuiltEngine, Engine, EngineSettings
from .registry import ENGINE_NAMES, backend_type
from .runtime import Runtime

__all__ = [
    "ENGINE_NAMES",
    "Backend",
    "BatchShape",
    "BuiltEngine",
    "Engine",
    "EngineSettings",
    "Runtime",
    "backend_type",
]
