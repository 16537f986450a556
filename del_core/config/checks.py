"""The value checks of the configuration sections: each refusal names the dotted key."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .loader import ConfigError


def check_choice(section: str, name: str, value: Any, choices: Sequence[Any]) -> None:
    """ConfigError naming ``section.name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{section}.{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_at_least(section: str, values: dict[str, float], low: float) -> None:
    """ConfigError naming the first key of ``values`` (names under ``section``) below ``low``."""
    for name, value in values.items():
        if not value >= low:
            raise ConfigError(f"{section}.{name} must be >= {low:g}, got {value}")


def dotted_values(config: Any) -> dict[str, Any]:
    """A config dataclass's values by dotted key (``{"parallel.tp": 1, "lora.enabled": False, ...}``),
    what a refusal that names its key reads."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}{key}.", inner)
        else:
            flat[prefix.rstrip(".")] = value

    walk("", dataclasses.asdict(config))
    return flat
