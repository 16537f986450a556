"""Seeded arithmetic problems with exact answers, in disjoint splits.

Five task families, each a function of a ``random.Random`` and a digit budget ``digits`` (the
largest operand width):

  add       "482+37="          -> "519"        integers of 1..digits digits
  sub       "482-37="          -> "445"        first operand >= second (no negative answers)
  mul       "482*7="           -> "3374"       1..digits digits times one digit
  decimal   "4.82+3.7="        -> "8.52"       1-3 decimals, sum or difference (>= 0)
  convert   "4.82 km in m="    -> "4820"       scaling by a power of ten (km m cm mm, kg g)

Each is a :class:`del_core.data.synthetic.Problem` (the ``question`` is the prompt, ``family`` the
task); answers are written by the project's one :func:`~del_core.data.synthetic.answer_text`
(no exponent or trailing zeros). A problem's split
is a function of its text alone (a hash), so train, validation and test never share a problem
whatever the seeds and sizes; the out-of-distribution split uses ``digits + 1``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from decimal import Decimal

from del_core.data.synthetic import Problem, answer_text

TASKS = ("add", "sub", "mul", "decimal", "convert")
SPLITS = ("train", "val", "test")
# Share of the problem space (by text hash) each in-distribution split owns.
_SPLIT_SHARE = {"train": 0.8, "val": 0.1, "test": 0.1}
_UNITS = {"km": 3, "m": 0, "cm": -2, "mm": -3}
_MASSES = {"kg": 3, "g": 0}


def _integer(rng: random.Random, digits: int) -> int:
    """An integer of 1..digits digits, the width drawn first (short numbers are not rare)."""
    width = rng.randint(1, digits)
    return rng.randint(10 ** (width - 1) if width > 1 else 0, 10**width - 1)


def _decimal(rng: random.Random, digits: int) -> Decimal:
    """A positive decimal with 1..digits integer digits and 1..3 decimals."""
    places = rng.randint(1, 3)
    return Decimal(_integer(rng, digits) * 10**places + rng.randint(1, 10**places - 1)).scaleb(-places)


def _add(rng: random.Random, digits: int) -> Problem:
    a, b = _integer(rng, digits), _integer(rng, digits)
    return Problem(f"{a}+{b}=", Decimal(a + b), family="add")


def _sub(rng: random.Random, digits: int) -> Problem:
    a, b = sorted((_integer(rng, digits), _integer(rng, digits)), reverse=True)
    return Problem(f"{a}-{b}=", Decimal(a - b), family="sub")


def _mul(rng: random.Random, digits: int) -> Problem:
    a, b = _integer(rng, digits), rng.randint(2, 9)
    return Problem(f"{a}*{b}=", Decimal(a * b), family="mul")


def _decimal_op(rng: random.Random, digits: int) -> Problem:
    a, b = _decimal(rng, digits), _decimal(rng, digits)
    if rng.random() < 0.5:
        return Problem(f"{answer_text(a)}+{answer_text(b)}=", a + b, family="decimal")
    a, b = max(a, b), min(a, b)
    return Problem(f"{answer_text(a)}-{answer_text(b)}=", a - b, family="decimal")


def _convert(rng: random.Random, digits: int) -> Problem:
    units = _UNITS if rng.random() < 0.75 else _MASSES
    source, target = rng.sample(sorted(units), 2)
    value = _decimal(rng, digits) if rng.random() < 0.5 else Decimal(_integer(rng, digits))
    converted = value.scaleb(units[source] - units[target])
    return Problem(f"{answer_text(value)} {source} in {target}=", converted, family="convert")


FAMILIES: dict[str, Callable[[random.Random, int], Problem]] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "decimal": _decimal_op,
    "convert": _convert,
}


def split_of(prompt: str) -> str:
    """The in-distribution split that owns ``prompt`` (a function of the text alone)."""
    point = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big") / 2**64
    edge = 0.0
    for split in SPLITS:
        edge += _SPLIT_SHARE[split]
        if point < edge:
            return split
    return SPLITS[-1]


def make_split(
    split: str, count: int, digits: int, seed: int, tasks: Sequence[str] = TASKS, unique: bool = True
) -> list[Problem]:
    """``count`` problems of ``split`` ("train", "val", "test", or "ood": ``digits + 1``, outside
    every in-distribution split by construction), tasks drawn uniformly, the same for the same
    arguments. ``unique``: no prompt twice (evaluation sets); training sets may repeat problems.

    Raises ``ValueError`` when the problem space is too small for ``count`` unique problems."""
    unknown = sorted(set(tasks) - set(FAMILIES))
    if split not in (*SPLITS, "ood") or unknown:
        raise ValueError(f"unknown split {split!r} or tasks {unknown}; splits {SPLITS + ('ood',)}, tasks {TASKS}")
    rng = random.Random(f"{split}:{seed}:{digits}:{','.join(tasks)}")
    width = digits + 1 if split == "ood" else digits
    problems: list[Problem] = []
    seen: set[str] = set()
    for _ in range(200 * count + 1000):
        if len(problems) == count:
            return problems
        problem = FAMILIES[rng.choice(list(tasks))](rng, width)
        if split == "ood" and not _uses_width(problem.question, width):
            continue
        if split != "ood" and split_of(problem.question) != split:
            continue
        if unique and problem.question in seen:
            continue
        seen.add(problem.question)
        problems.append(problem)
    raise ValueError(f"only {len(problems)} unique {split} problems of {digits} digits for {count} requested")


def _uses_width(prompt: str, width: int) -> bool:
    """Does some operand have an integer part of ``width`` digits (the OOD condition)?"""
    integers = "".join(c if c.isdigit() or c == "." else " " for c in prompt).split()
    return any(len(number.split(".")[0]) >= width for number in integers)
