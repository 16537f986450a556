"""Command-line arguments of the entry scripts: ``[RECIPE.yaml] key=value ...``.

Every entry script of ``recipes/`` takes a YAML recipe (or a first positional argument of its own,
such as evaluate's model) and ``key=value`` overrides, dotted for nested keys; ``--help`` lists the
keys (:func:`keys_help`). The release-0.1 spellings ``--key value``, ``--key=value`` and a bare
``--flag`` are still read as ``key=value`` (``flag=true``), with a deprecation warning naming the
new spelling.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional

from del_core.config.deprecation import REMOVED_IN, warn_deprecated
from del_core.config.loader import ConfigError

_ASSIGNMENT = re.compile(r"^[A-Za-z_][\w.-]*=")
HELP_FLAGS = ("-h", "--help")


def split_command_line(
    argv: Sequence[str], renamed: Mapping[str, str] = MappingProxyType({}), removed_in: str = REMOVED_IN
) -> tuple[Optional[str], list[str]]:
    """(recipe path or None, overrides as ``key=value``) from the arguments of an entry script.

    The first argument is the recipe when it has no ``=`` (or ends in .yaml/.yml). ``--key value``
    and ``--key=value`` (deprecated) become ``key=value`` (dashes in the key read as underscores;
    ``renamed`` maps such a key to the dotted key that replaced it, ``loss_weight`` ->
    ``loss.weight``); a bare ``--flag`` followed by another option, a ``key=value`` or nothing
    reads as ``flag=true``; the warning names ``removed_in``, the release that drops the flags.
    ``--local_rank``, which the deepspeed launcher adds, is dropped
    (LOCAL_RANK is in the environment).
    """
    args = list(argv)
    recipe = None
    if args and not args[0].startswith("--") and ("=" not in args[0] or args[0].endswith((".yaml", ".yml"))):
        recipe = args.pop(0)
    overrides: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token.startswith("--"):
            key, sep, value = token[2:].partition("=")
            written = token
            if not sep:
                has_value = (
                    index < len(args) and not args[index].startswith("--") and not _ASSIGNMENT.match(args[index])
                )
                value = args[index] if has_value else "true"
                written = f"{token} {value}" if has_value else token
                index += has_value
            key = key.replace("-", "_")
            if key == "local_rank":
                continue
            overrides.append(f"{renamed.get(key, key)}={value}")
            warn_deprecated(f"the option '{written}'", f"'{overrides[-1]}'", removed_in=removed_in)
        elif "=" in token:
            overrides.append(token)
        else:
            raise ConfigError(f"command line: unexpected argument {token!r} (expected key=value)")
    return recipe, overrides


def option(default: Any, text: str = "", metavar: str = "") -> Any:
    """A dataclass field with ``default`` whose ``help`` (``text``) and ``metavar`` (the placeholder
    shown for a default of None) :func:`keys_help` lists."""
    return dataclasses.field(default=default, metadata={"help": text, "metavar": metavar})


def keys_help(schema: type, prefix: str = "") -> str:
    """One line per key of the dataclass ``schema`` (sections of nested dataclasses as dotted
    keys): ``key=DEFAULT`` and, where the field's metadata has one, its ``help`` text."""
    lines = []
    for option in dataclasses.fields(schema):
        default = _default(option)
        name = f"{prefix}{option.name}"
        if dataclasses.is_dataclass(default):
            lines.append(keys_help(type(default), f"{name}."))
            continue
        shown = option.metadata.get("metavar") if default is None else default
        text = option.metadata.get("help", "")
        assignment = f"{name}={'' if shown is None else shown}"
        lines.append(f"  {assignment:<32} {text}".rstrip())
    return "\n".join(lines)


def _default(option: dataclasses.Field) -> Any:
    if option.default is not dataclasses.MISSING:
        return option.default
    if option.default_factory is not dataclasses.MISSING:
        return option.default_factory()
    return None
