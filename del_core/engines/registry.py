"""``parallel.engine`` -> the engine's :class:`del_core.engines.Backend`: one row per engine, the
default first. Adding an engine is one module under del_core/engines and one row here."""

from __future__ import annotations

from del_core.config import ConfigError

from .ddp import DDPBackend
from .deepspeed import DeepSpeedBackend
from .fsdp2 import FSDP2Backend
from .interface import Backend

BACKENDS: dict[str, type[Backend]] = {
    DeepSpeedBackend.name: DeepSpeedBackend,
    FSDP2Backend.name: FSDP2Backend,
    DDPBackend.name: DDPBackend,
}
ENGINE_NAMES = tuple(BACKENDS)  # the values parallel.engine takes


def backend_type(name: str) -> type[Backend]:
    """The backend class of ``parallel.engine=name``; ConfigError naming the key otherwise."""
    if name not in BACKENDS:
        raise ConfigError(f"parallel.engine must be one of {', '.join(ENGINE_NAMES)}, got {name!r}")
    return BACKENDS[name]
