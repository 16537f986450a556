"""What a form of the grader-check corpus writes: :class:`Rendering` (one output and its label), the
type of a form (:data:`Form`), and the values forms write, derived from the record alone.

A form takes (record, wrong value, pool of sampled records) and returns a Rendering. Numbers are
exact (:class:`~fractions.Fraction`) and written by the corpus's own helpers, not by the project's
number reader (:mod:`del_core.evaluation.answers.numbers`), so that the corpus does not inherit the
rules it checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from del_core.evaluation.question import LETTERS, Record


@dataclass(frozen=True)
class Rendering:
    """What a form writes for one record."""

    output: str
    label: str
    channel: str = "text"


def gold_value(record: Record) -> Optional[Fraction]:
    """The gold as an exact number when it is one (numbers: the first), else None."""
    gold = record.gold[0] if isinstance(record.gold, list) else record.gold
    if record.kind == "choice":
        return None
    if re.fullmatch(r"-?\d+(?:\.\d+)?", str(gold).strip()):
        return Fraction(str(gold).strip())
    return None


def gold_text(record: Record) -> str:
    """The gold as written (numbers: the first unknown's)."""
    if record.kind == "choice":
        return record.gold
    return record.gold[0] if isinstance(record.gold, list) else record.gold


def rounded_text(value: Fraction, places: int) -> str:
    """``value`` rounded half away from zero to ``places`` fractional digits."""
    scaled = abs(value) * 10**places
    rounded = int(scaled + Fraction(1, 2))
    sign = "-" if value < 0 and rounded else ""
    digits = str(rounded).rjust(places + 1, "0")
    return sign + (digits[:-places] + "." + digits[-places:] if places else digits)


def number_text(value: Fraction) -> str:
    """An exact number as a plain decimal text ("18", "2.5")."""
    if value.denominator == 1:
        return str(value.numerator)
    places = 0
    while (value * 10**places).denominator != 1 and places < 12:
        places += 1
    return rounded_text(value, places)


def wrong_value(record: Record, pool: Sequence[Record]) -> str:
    """A value that is not the gold: the gold plus a bit for a number, another record's gold for a
    MATH answer that is no plain number."""
    value = gold_value(record)
    if value is not None:
        step = Fraction(1) if value.denominator == 1 else Fraction(1, 10)
        return number_text(value + step * (1 + record.index % 3))
    gold = gold_text(record)
    for other in pool[record.index % len(pool) :] + pool[: record.index % len(pool)]:
        text = gold_text(other)
        if _loose(text) != _loose(gold) and gold_value(other) is None and not _verified(text, gold):
            return text
    return "1+" + gold


def _loose(text: str) -> str:
    return re.sub(r"\s|\\[,;! ]|\\left|\\right|d(?=frac)", "", text)


def _verified(a: str, b: str) -> bool:
    """math-verify's own verdict, to keep an accidental equivalent out of the wrong values."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse(f"${b}$"), parse(f"${a}$")))
    except Exception:  # noqa: BLE001 - any failure of the checker: keep the candidate out
        return True


def other_letters(record: Record) -> tuple[str, str]:
    """Two letters other than the gold, fixed by the record."""
    letters = LETTERS[: len(record.choices)]
    others = [x for x in letters if x != record.gold]
    first = others[record.index % len(others)]
    second = others[(record.index + 1) % len(others)]
    return first, second


def thousands_text(value: Fraction, separator: str) -> Optional[str]:
    """An integer of four or more digits with a thousands separator, or None."""
    if value.denominator != 1 or abs(value) < 1000:
        return None
    digits = f"{abs(value.numerator):,}".replace(",", separator)
    return ("-" if value < 0 else "") + digits


def scale_words_text(value: Fraction) -> Optional[str]:
    """ "1.45 million" / "18 thousand" when the value is a round multiple, or None."""
    for word, scale in (("billion", 10**9), ("million", 10**6), ("thousand", 10**3)):
        if abs(value) >= scale and (value / scale * 100).denominator == 1:
            return f"{number_text(value / scale)} {word}"
    return None


def sympy_text(gold: str) -> Optional[str]:
    """The gold as sympy prints it ("9*pi", "3/4", "Interval.Lopen(2, 5)"), via math-verify's parser."""
    from math_verify import parse

    try:
        parsed = parse(f"${gold}$")
    except Exception:  # noqa: BLE001 - the parser gives up on some answers
        return None
    return str(parsed[0]) if parsed else None


def repeating_fraction(value: Fraction, places: int) -> Optional[Fraction]:
    """The fraction of smallest denominator (3..99, not a power of 2 and 5 only) that rounds to
    ``value`` at ``places`` digits, or None: the exact value a rounded gold stands for."""
    half = Fraction(1, 2 * 10**places)
    for denominator in range(3, 100):
        rest = denominator
        for prime in (2, 5):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            continue
        numerator = round(value * denominator)
        candidate = Fraction(numerator, denominator)
        if candidate.denominator == denominator and abs(candidate - value) < half:
            return Fraction(numerator, denominator)
    return None


def working(record: Record) -> str:
    """The line of working every text form starts with (the question's first two numbers, if any)."""
    numbers = re.findall(r"\d+(?:\.\d+)?", record.question)[:2]
    if len(numbers) == 2:
        return f"We combine {numbers[0]} and {numbers[1]} as the question says."
    return "We work through the question step by step."


def choice_parts(record: Record) -> tuple[str, str, str, str]:
    """(gold letter, gold option's text, another letter, a third letter) of a multiple-choice record."""
    gold = record.gold
    other, third = other_letters(record)
    return gold, record.choices[LETTERS.index(gold)], other, third


Form = Callable[[Record, str, Sequence[Record]], Rendering]
