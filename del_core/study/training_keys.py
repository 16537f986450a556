"""The training keys of a study: which overrides are training keys, their canonical dotted names
(:mod:`del_core.training.config`), and how values are written on train.py's command line.

A training key may be written as the dotted key (``run.max_steps``), a section given a mapping
(``run: {max_steps: 6}``), a section's shorthand (``optimizer=torch`` -> ``optimizer.name``) or an
old flat key (``max_steps`` -> ``run.max_steps``, :data:`~del_core.training.config.TRAIN_ALIASES`).
Keys the study sets for every run itself (:data:`STUDY_OWNED_KEYS`) are refused with the study key
to use instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from del_core.config import ConfigError
from del_core.training.config import TRAIN_ALIASES, TrainConfig

# Set per run by the study (from model, losses, seeds, loss_weights, heldout_size and its data).
STUDY_OWNED_KEYS = (
    "model.name",
    "loss.name",
    "loss.weight",
    "run.seed",
    "data.source",
    "data.eval_source",
    "data.eval_size",
    "data.eval_generate",
    "run.output_dir",
    "run.export",
    "run.resume",
)
_SECTIONS: dict[str, type] = typing.get_type_hints(TrainConfig)
KNOWN_KEYS = tuple(f"{section}.{f.name}" for section, cls in _SECTIONS.items() for f in dataclasses.fields(cls))


@dataclass(frozen=True)
class TrainItem:
    """One training override: its canonical dotted key, the value (command-line text as written, or
    a YAML value) and where it was written (for error messages)."""

    key: str
    value: Any
    where: str


def is_training_key(key: str) -> bool:
    """``key`` (as written) names a training key or section."""
    section = key.split(".")[0]
    return key in TRAIN_ALIASES.deprecated or section in _SECTIONS


def _unknown(key: str, where: str) -> ConfigError:
    close = difflib.get_close_matches(key, KNOWN_KEYS, n=3, cutoff=0.6)
    by_leaf = {k.split(".")[-1]: k for k in KNOWN_KEYS}
    close += [
        by_leaf[k]
        for k in difflib.get_close_matches(key.split(".")[-1], list(by_leaf), n=3, cutoff=0.6)
        if by_leaf[k] not in close
    ]
    hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
    return ConfigError(f"{where}: unknown training key {key!r}{hint}")


def _canonical(key: str, where: str, warn: Callable[[str], None]) -> str:
    if key in _SECTIONS:
        if key not in TRAIN_ALIASES.shorthands:
            raise ConfigError(f"{where}: {key} is a training section; give a mapping or {key}.<key>=value")
        return f"{key}.{TRAIN_ALIASES.shorthands[key]}"
    if key in TRAIN_ALIASES.deprecated:
        warn(key)
        return TRAIN_ALIASES.deprecated[key]
    return key


def train_items(key: str, value: Any, where: str, warn: Callable[[str], None] = lambda key: None) -> list[TrainItem]:
    """The canonical items of one training override (a section mapping gives one per key); the
    :class:`ConfigError` of an unknown or study-owned key names it and ``where``. ``warn`` is called
    with an old flat key before it is renamed."""
    if key in _SECTIONS and isinstance(value, Mapping):
        return [item for inner, v in value.items() for item in train_items(f"{key}.{inner}", v, where, warn)]
    dotted = _canonical(key, where, warn)
    if dotted not in KNOWN_KEYS:
        raise _unknown(dotted, where)
    if dotted in STUDY_OWNED_KEYS:
        raise ConfigError(
            f"{where}: {key!r} is set by the study for each run ({dotted}); use the study keys "
            "(model, losses, seeds, loss_weights, heldout_size)"
        )
    return [TrainItem(dotted, value, where)]


def _warn_deprecated(where: str) -> Callable[[str], None]:
    def warn(key: str) -> None:
        print(
            f"warning: {where}: key {key!r} is deprecated and will be removed in the next release; use "
            f"{TRAIN_ALIASES.deprecated[key]!r}",
            file=sys.stderr,
            flush=True,
        )

    return warn


def items_of_mapping(mapping: Mapping[str, Any], where: str) -> list[TrainItem]:
    """The items of a ``train:`` mapping (nested sections or dotted keys; old flat keys warn)."""
    return [item for key, value in mapping.items() for item in train_items(key, value, where, _warn_deprecated(where))]


def items_of_override(key: str, text: str, where: str = "command line") -> list[TrainItem]:
    """The items of a command-line ``key=text``: ``train=<YAML mapping>``, ``train.<key>=...``, or a
    training key given at the top level (old flat names are the study's documented shorthand there,
    so they do not warn)."""
    if key == "train":
        mapping = yaml.safe_load(text) if text.strip() else {}
        if not isinstance(mapping, dict):
            raise ConfigError(f"{where}: train must be a mapping of training keys, got {text!r}")
        return items_of_mapping(mapping, where)
    if key.startswith("train."):
        return train_items(key[len("train.") :], text, where, _warn_deprecated(where))
    return train_items(key, text, where)


def nest(items: Iterable[TrainItem]) -> dict[str, dict[str, Any]]:
    """``{section: {key: value}}`` of ``items``; a later item replaces an earlier one of the same key."""
    nested: dict[str, dict[str, Any]] = {}
    for item in items:
        section, name = item.key.split(".", 1)
        nested.setdefault(section, {})[name] = item.value
    return nested


def flatten(nested: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``{"section.key": value}`` of a nested training mapping."""
    return {f"{section}.{name}": value for section, values in nested.items() for name, value in values.items()}


def override_text(value: Any) -> str:
    """``value`` as train.py's ``key=value`` reads it back: text as written, booleans as true/false,
    lists and mappings as YAML flow (JSON), None as empty (null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    return "" if value is None else str(value)
