"""Numbers as written: every numeric key takes every spelling YAML 1.2 and Python take for its type.

A value reaches a schema's numeric key as YAML read it (PyYAML reads YAML 1.1) or as a YAML
mapping's leaves. The rules, for recipes and the command line alike:

* a ``float`` key takes an int (``1`` is 1.0) and any finite float spelling: ``0.5``, ``.5``,
  ``5.``, ``1e-3``, ``1E3``, ``+1.5e+2``, ``1_000.5``. YAML 1.1 reads ``1e-3`` (no dot, or no
  exponent sign) as the text "1e-3"; it is read here as YAML 1.2 and Python read it, 0.001.
  ``nan`` and ``inf`` are refused: no setting of the project means them;
* an ``int`` key takes integer spellings: ``1000``, ``1_000``, ``+3`` (and YAML's ``0x10``);
  a float spelling (``1e3``, ``2.0``) is refused rather than rounded;
* a key that takes a number or a word (``loss.weight``: a number or ``auto``) reads a number
  spelling as the number and anything else as the word;
* lists and mappings of numbers (``optimizer.betas``, ``grids``) apply the rule to each item;
  a free mapping (``loss.options``) reads a YAML 1.2 float spelling in it as the float;
* booleans are never numbers (``true`` for an int key is refused).
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Union

# YAML 1.2's core-schema float, with Python's digit separators: what PyYAML leaves as text.
_FLOAT_SPELLING = re.compile(r"[-+]?(\.[0-9][0-9_]*|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?")
_INT_SPELLING = re.compile(r"[-+]?[0-9][0-9_]*")


class NumberError(ValueError):
    """A value that does not read as the number its key takes; the message names the value."""


def _finite(number: float, text: Any) -> float:
    if not math.isfinite(number):
        raise NumberError(f"must be a finite number, got {text!r}")
    return number


def as_float(value: Any) -> float:
    """``value`` (an int, a float or a float spelling) as a finite float; :class:`NumberError` else."""
    if isinstance(value, bool):
        raise NumberError(f"must be a number, got the boolean {value}")
    if isinstance(value, (int, float)):
        return _finite(float(value), value)
    if isinstance(value, str) and _FLOAT_SPELLING.fullmatch(value.strip()):
        return _finite(float(value.strip()), value)
    raise NumberError(f"must be a number, got {value!r}")


def as_int(value: Any) -> int:
    """``value`` (an int or an integer spelling) as an int; :class:`NumberError` else."""
    if isinstance(value, bool):
        raise NumberError(f"must be an integer, got the boolean {value}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_SPELLING.fullmatch(value.strip()):
        return int(value.strip())
    raise NumberError(f"must be an integer, got {value!r}")


def _members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return tuple(member for member in typing.get_args(hint) if member is not type(None))
    return (hint,)


def typed_numbers(hint: Any, value: Any) -> Any:
    """``value`` with its numbers read by the rules above for a key of type ``hint`` (a schema
    field's type hint); values of other types come back as they are. :class:`NumberError` for a
    value a numeric key cannot read."""
    if value is None:
        return None
    members = _members(hint)
    if float in members:
        if str in members and isinstance(value, str) and not _FLOAT_SPELLING.fullmatch(value.strip()):
            return value  # the word of a number-or-word key (loss.weight=auto)
        return as_float(value)
    if int in members and bool not in members:
        return as_int(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args and isinstance(value, (list, tuple)):
        return [typed_numbers(args[0], item) for item in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {key: typed_numbers(args[1], item) for key, item in value.items()}
    if hint is Any:
        if isinstance(value, dict):
            return {key: typed_numbers(Any, item) for key, item in value.items()}
        return _free_number(value)
    return value


def _free_number(value: Any) -> Any:
    """A leaf of a free mapping: a YAML 1.2 float spelling that YAML 1.1 left as text is the float."""
    if isinstance(value, str) and _FLOAT_SPELLING.fullmatch(value.strip()) and not value.strip().isdigit():
        return as_float(value)
    return value
