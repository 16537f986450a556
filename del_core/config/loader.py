"""Loading a structured configuration: schema defaults <- YAML recipe (with ``base:``) <- overrides.

Values are typed by the schema: numbers as :mod:`del_core.config.number_spellings` reads them (``lr=2e-5``
and ``loss.weight=1e-3`` are floats, in a recipe and on the command line alike), the rest through
OmegaConf (``packing=true`` is a bool, ``loss.options={eta: 0.3}`` a mapping); an empty value
(``loss.weight=``) is null. Unknown keys and wrong types raise :class:`ConfigError` naming the key, its source and,
for a misspelt key, the closest known ones.

``KeyAliases`` name a schema's other spellings of keys: ``shorthands`` map a section name given a
scalar to that section's main key (``loss=mle`` -> ``loss.name=mle``); ``removed`` map keys that an
earlier release read to the key that replaced them, so that a recipe or override still using one
is refused with a one-line :class:`ConfigError` naming the new key (``lr`` -> ``optimizer.lr``),
never silently ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from del_core.config.number_spellings import NumberError, typed_numbers

BASE_KEY = "base"  # a recipe's key naming the recipe file it extends (relative to itself)
Schema = TypeVar("Schema")


class ConfigError(ValueError):
    """A bad recipe or override; the message names the key and where it came from."""


@dataclass(frozen=True)
class KeyAliases:
    """Other spellings of a schema's keys: see the module docstring."""

    shorthands: dict[str, str] = field(default_factory=dict)  # section -> its main key
    removed: dict[str, str] = field(default_factory=dict)  # a key no longer read -> the dotted key now


def read_yaml_mapping(path: str | Path, what: str = "recipe", error: type = ConfigError) -> dict:
    """The YAML mapping in ``path``; ``error`` naming the file when it is missing, not YAML, or not
    a mapping (``what`` says which kind of file it should be)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise error(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: a {what} is a mapping of keys to values")
    return data


def _recipe_layers(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[dict, str]]:
    """The mappings of ``path`` and the recipes it extends, base first, each with its file name."""
    resolved = path.resolve()
    if resolved in seen:
        raise ConfigError(f"{path}: '{BASE_KEY}' chain loops back to {resolved}")
    data = read_yaml_mapping(path)
    base = data.pop(BASE_KEY, None)
    layers: list[tuple[dict, str]] = []
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"{path}: '{BASE_KEY}' must be the path of a recipe file")
        layers = _recipe_layers(path.parent / base, (*seen, resolved))
    return [*layers, (data, str(path))]


@dataclass(frozen=True)
class _RawText:
    """A command-line value not parsed yet: a text-typed key keeps it as written (``resume=no``
    is the text "no", not YAML 1.1's false); any other key reads it as YAML."""

    text: str


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    key = key.strip().lstrip("-").replace("-", "_")
    if not sep or not key:
        raise ConfigError(f"override {item!r}: expected key=value")
    return key, (_RawText(text) if text.strip() else None)


def _field_hint(schema: type, dotted: str) -> Any:
    """The type hint of the key ``dotted`` of ``schema`` (a section's dataclass for a section), or
    None for an unknown key."""
    owner: Any = schema
    *sections, name = dotted.split(".")
    for section in sections:
        owner = _section_types(owner).get(section)
        if owner is None:
            return None
    return _section_types(owner).get(name) or typing.get_type_hints(owner).get(name)


def _is_text_field(schema: type, dotted: str) -> bool:
    hint = _field_hint(schema, dotted)
    return hint is str or hint == Optional[str]


def _read_numbers(schema: type, dotted: str, value: Any, where: str) -> Any:
    """``value`` with the numbers of ``dotted`` (a key or a section given as a mapping) read as
    written (:mod:`del_core.config.number_spellings`); a :class:`ConfigError` naming the key otherwise."""
    hint = _field_hint(schema, dotted)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return {inner: _read_numbers(schema, f"{dotted}.{inner}", item, where) for inner, item in value.items()}
    try:
        return typed_numbers(hint, value)
    except NumberError as err:
        raise ConfigError(f"{where}: {dotted} {err}") from None


def _typed_value(schema: type, dotted: str, value: Any, where: str) -> Any:
    text_field = _is_text_field(schema, dotted)
    if isinstance(value, _RawText):
        if text_field:
            return value.text
        try:
            return yaml.safe_load(value.text)
        except yaml.YAMLError as err:
            raise ConfigError(f"{where}: {dotted}={value.text!r}: value is not valid YAML ({err})") from None
    if text_field and isinstance(value, bool):
        raise ConfigError(f"{where}: {dotted} is text, got the YAML boolean {value}; quote it (e.g. 'no')")
    return value


def _section_types(schema: type) -> dict[str, type]:
    hints = {
        f.name: f.default_factory for f in dataclasses.fields(schema) if f.default_factory is not dataclasses.MISSING
    }
    return {name: factory for name, factory in hints.items() if dataclasses.is_dataclass(factory)}


def _unknown_key_error(key: str, schema: type, where: str) -> ConfigError:
    known = _known_keys_of(schema)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    leaf = key.split(".")[-1]
    by_leaf = {k.split(".")[-1]: k for k in known}
    close += [
        by_leaf[k] for k in difflib.get_close_matches(leaf, list(by_leaf), n=3, cutoff=0.6) if by_leaf[k] not in close
    ]
    hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
    return ConfigError(f"{where}: unknown key {key!r}{hint}")


def _known_keys_of(schema: type) -> list[str]:
    keys = []
    for name in (f.name for f in dataclasses.fields(schema)):
        section = _section_types(schema).get(name)
        keys += [f"{name}.{f.name}" for f in dataclasses.fields(section)] if section else [name]
    return keys


def _place(key: str, value: Any, schema: type, aliases: KeyAliases, where: str) -> str:
    """The dotted key where ``key`` (as written) belongs."""
    sections = _section_types(schema)
    if key in sections:
        if isinstance(value, dict):
            return key
        if key in aliases.shorthands:
            return f"{key}.{aliases.shorthands[key]}"
        raise ConfigError(f"{where}: {key} is a section; give a mapping or {key}.<key>=value")
    if key in aliases.removed:
        raise ConfigError(f"{where}: key {key!r} was removed; use {aliases.removed[key]!r}")
    return key


def _as_list_if_needed(current: DictConfig, dotted: str, value: Any) -> Any:
    """For a list-valued key, ``a,b`` is the list [a, b] and a single value ``a`` is [a]."""
    if not isinstance(OmegaConf.select(current, dotted), ListConfig):
        return value
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value if value is None or isinstance(value, (list, tuple)) else [value]  # one item: seeds=0


def _layer(
    values: Iterable[tuple[str, Any]],
    current: DictConfig,
    schema: type,
    aliases: KeyAliases,
    where: str,
) -> DictConfig:
    """One recipe or the overrides as a config to merge, keys moved to their dotted place."""
    layer = OmegaConf.create({})
    known = set(_known_keys_of(schema)) | set(_section_types(schema))
    for key, value in values:
        if key in _section_types(schema) and isinstance(value, _RawText):
            value = _typed_value(schema, key, value, where)  # a section given as a YAML mapping
        dotted = _place(key, value, schema, aliases, where)
        if dotted not in known:
            raise _unknown_key_error(dotted, schema, where)
        if isinstance(value, dict) and dotted in _section_types(schema):
            for inner in value:
                if f"{dotted}.{inner}" not in known:
                    raise _unknown_key_error(f"{dotted}.{inner}", schema, where)
        value = _as_list_if_needed(current, dotted, _typed_value(schema, dotted, value, where))
        value = _read_numbers(schema, dotted, value, where)
        OmegaConf.update(layer, dotted, value, merge=True, force_add=True)
    return layer


def _merge(base: DictConfig, layer: DictConfig, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, layer)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        message = str(err).splitlines()[0]
        raise ConfigError(f"{where}: {key}: {message}") from None


def placed_keys(
    schema: type,
    mapping: Optional[Mapping[str, Any]] = None,
    overrides: Sequence[str] = (),
    aliases: KeyAliases = KeyAliases(),
    where: str = "command line",
) -> dict[str, Any]:
    """The keys of ``mapping`` (YAML values) and then ``overrides`` (``key=value`` text), each moved
    to its dotted place as :func:`load_config` reads them (shorthands applied; a removed key a
    :class:`ConfigError` naming its replacement, an unknown one a :class:`ConfigError` naming it,
    ``where`` and the closest known keys), as a nested mapping
    ``{section: {key: value}}``; the values are checked against their types by :func:`load_config`."""
    items = [*(mapping or {}).items(), *(_parse_override(item) for item in overrides)]
    layer = _layer(items, OmegaConf.structured(schema), schema, aliases, where)
    return OmegaConf.to_container(layer)


def load_config(
    schema: type[Schema],
    recipe: Optional[str | Path] = None,
    overrides: Sequence[str] = (),
    aliases: KeyAliases = KeyAliases(),
    layers: Sequence[tuple[Mapping[str, Any], str]] = (),
) -> Schema:
    """An instance of ``schema``: defaults, then ``recipe`` (and its bases), then ``layers``
    (mappings made in code, each with where it came from, for error messages), then ``overrides``.

    The dataclass's ``__post_init__`` runs on the result, so value checks placed there apply to
    every entry point; a ``ValueError`` it raises becomes a :class:`ConfigError`.
    """
    config = OmegaConf.structured(schema)
    if recipe is not None:
        for values, where in _recipe_layers(Path(recipe)):
            config = _merge(config, _layer(values.items(), config, schema, aliases, where), where)
    for values, where in layers:
        config = _merge(config, _layer(values.items(), config, schema, aliases, where), where)
    # In the order given: a later override wins, whichever spelling (shorthand or dotted) it uses.
    parsed = [_parse_override(item) for item in overrides]
    config = _merge(config, _layer(parsed, config, schema, aliases, "command line"), "command line")
    try:
        return OmegaConf.to_object(config)
    except ConfigError:
        raise
    except (OmegaConfBaseException, ValueError) as err:
        raise ConfigError(str(err).splitlines()[0]) from None


def config_to_dict(config: Any) -> dict:
    """Plain YAML/JSON-able values of a structured config instance (sections as mappings)."""
    return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)


def config_to_yaml(config: Any) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)
