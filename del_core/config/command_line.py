"""Command-line arguments of the entry scripts: ``[RECIPE.yaml] key=value ... --key value ...``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from del_core.config.loader import ConfigError

_ASSIGNMENT = re.compile(r"^[A-Za-z_][\w.-]*=")


def split_command_line(argv: Sequence[str]) -> tuple[Optional[str], list[str]]:
    """(recipe path or None, overrides as ``key=value``) from the arguments of an entry script.

    The first argument is the recipe when it has no ``=`` (or ends in .yaml/.yml). ``--key value``
    and ``--key=value`` become ``key=value`` (dashes in the key read as underscores); a bare
    ``--flag`` followed by another option, a ``key=value`` or nothing reads as ``flag=true``. ``--local_rank``, which
    the deepspeed launcher adds, is dropped (LOCAL_RANK is in the environment).
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
            if not sep:
                has_value = (
                    index < len(args) and not args[index].startswith("--") and not _ASSIGNMENT.match(args[index])
                )
                value = args[index] if has_value else "true"
                index += has_value
            if key.replace("-", "_") == "local_rank":
                continue
            overrides.append(f"{key.replace('-', '_')}={value}")
        elif "=" in token:
            overrides.append(token)
        else:
            raise ConfigError(f"command line: unexpected argument {token!r} (expected key=value or --key value)")
    return recipe, overrides
