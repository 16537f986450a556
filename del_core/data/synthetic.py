"""A seeded generator of arithmetic word problems with exact integer and decimal answers.

Rows are MathInstruct-style dicts: ``instruction``, ``input`` (empty), ``output`` (a worked step
and "The answer is X."), plus ``answer`` (the exact answer as text). Arithmetic is done with
``decimal.Decimal`` so answers carry no binary floating-point artefacts.
"""
from __future__ import annotations

import random
from decimal import Decimal
from typing import Callable

ITEMS = ("apples", "notebooks", "tickets", "bottles of juice", "pencils", "bags of rice")
NAMES = ("Ava", "Ben", "Chloe", "Dev", "Mia", "Omar", "Lena", "Tariq")


def _money(rng: random.Random) -> Decimal:
    return Decimal(rng.randint(105, 9999)) / 100


def _total_cost(rng: random.Random) -> tuple[str, str, Decimal]:
    n, price, item, name = rng.randint(2, 48), _money(rng), rng.choice(ITEMS), rng.choice(NAMES)
    total = n * price
    question = f"{name} buys {n} {item} at ${price} each. How much does {name} pay in total?"
    return question, f"{n} * {price} = {total}", total


def _remaining(rng: random.Random) -> tuple[str, str, Decimal]:
    start = Decimal(rng.randint(1000, 99999)) / 10
    used = Decimal(rng.randint(10, int(start * 10) - 1)) / 10
    question = f"A tank holds {start} liters of water. {used} liters are used. How many liters are left?"
    return question, f"{start} - {used} = {start - used}", start - used


def _sum_of_counts(rng: random.Random) -> tuple[str, str, Decimal]:
    a, b, c = (rng.randint(10, 9999) for _ in range(3))
    question = f"A library lends {a} books in May, {b} in June and {c} in July. How many books in all?"
    return question, f"{a} + {b} + {c} = {a + b + c}", Decimal(a + b + c)


def _share(rng: random.Random) -> tuple[str, str, Decimal]:
    people = rng.choice((2, 4, 5, 8))
    each = Decimal(rng.randint(100, 99999)) / 100
    total = each * people
    question = f"{people} friends share a bill of ${total} equally. How much does each friend pay?"
    return question, f"{total} / {people} = {each}", each


def _product(rng: random.Random) -> tuple[str, str, Decimal]:
    a, b = rng.randint(12, 999), rng.randint(3, 99)
    return f"What is {a} times {b}?", f"{a} * {b} = {a * b}", Decimal(a * b)


GENERATORS: tuple[Callable[[random.Random], tuple[str, str, Decimal]], ...] = (
    _total_cost,
    _remaining,
    _sum_of_counts,
    _share,
    _product,
)


def make_problems(count: int, seed: int = 0) -> list[dict[str, str]]:
    """``count`` problems, the same for the same seed."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        question, step, answer = rng.choice(GENERATORS)(rng)
        text = format(answer.normalize(), "f") if answer == answer.to_integral() else str(answer)
        rows.append(
            {"instruction": question, "input": "", "output": f"{step}\nThe answer is {text}.", "answer": text}
        )
    return rows
