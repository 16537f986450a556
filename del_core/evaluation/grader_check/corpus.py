"""A generated corpus of model-style outputs for differential grading, labelled by construction.

Every item is one output for one real benchmark record, written in one *form* (a phrasing, a LaTeX
or program rendering, a hedge, an elimination, a unit, a rounding). The form fixes the label:

  right      the output commits to the gold, written another way: must score correct
  wrong      the output commits to another value or option: must score wrong
  hedge      the output commits to two different values or options: must score wrong
  no_answer  the output never commits (echoes the options, gives up): must score wrong

``channel`` says how the project reads the item: "text" (a chain of thought,
``extract.answer_from_text``) or "program" (what a program printed,
``program_output.answer_from_program_output``).

A third of the forms (:data:`HELD_OUT_FORMS`) is held out: it was written together with the rest
before any scoring rule was changed, and its disagreements were not looked at while the rules were
changed; its agreement is reported on its own.

The corpus is deterministic: :func:`build_corpus` samples the records of each benchmark with a
fixed seed and each form derives its wrong values from the record alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from del_core.evaluation.question import LETTERS, Record, choices_text

LABELS = ("right", "wrong", "hedge", "no_answer")


@dataclass(frozen=True)
class CorpusItem:
    benchmark: str
    index: int  # the record's index in its benchmark file
    form: str
    label: str  # one of LABELS
    channel: str  # "text" | "program"
    output: str
    held_out: bool

    @property
    def expected(self) -> bool:
        """The verdict the construction asks for."""
        return self.label == "right"


@dataclass(frozen=True)
class Rendering:
    """What a form writes for one record."""

    output: str
    label: str
    channel: str = "text"


# ---------------------------------------------------------------------------------------------
# the values a form writes


def _plain_value(record: Record) -> Optional[Fraction]:
    """The gold as an exact number when it is one (numbers: the first), else None."""
    gold = record.gold[0] if isinstance(record.gold, list) else record.gold
    if record.kind == "choice":
        return None
    if re.fullmatch(r"-?\d+(?:\.\d+)?", str(gold).strip()):
        return Fraction(str(gold).strip())
    return None


def _gold_text(record: Record) -> str:
    if record.kind == "choice":
        return record.gold
    return record.gold[0] if isinstance(record.gold, list) else record.gold


def _decimal(value: Fraction, places: int) -> str:
    """``value`` rounded half away from zero to ``places`` fractional digits."""
    scaled = abs(value) * 10**places
    rounded = int(scaled + Fraction(1, 2))
    sign = "-" if value < 0 and rounded else ""
    digits = str(rounded).rjust(places + 1, "0")
    return sign + (digits[:-places] + "." + digits[-places:] if places else digits)


def _written(value: Fraction) -> str:
    """An exact number as a plain decimal text ("18", "2.5")."""
    if value.denominator == 1:
        return str(value.numerator)
    places = 0
    while (value * 10**places).denominator != 1 and places < 12:
        places += 1
    return _decimal(value, places)


def _wrong_value(record: Record, pool: Sequence[Record]) -> str:
    """A value that is not the gold: the gold plus a bit for a number, another record's gold for a
    MATH answer that is no plain number."""
    value = _plain_value(record)
    if value is not None:
        step = Fraction(1) if value.denominator == 1 else Fraction(1, 10)
        return _written(value + step * (1 + record.index % 3))
    gold = _gold_text(record)
    for other in pool[record.index % len(pool) :] + pool[: record.index % len(pool)]:
        text = _gold_text(other)
        if _loose(text) != _loose(gold) and _plain_value(other) is None and not _verified(text, gold):
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


def _other_letters(record: Record) -> tuple[str, str]:
    """Two letters other than the gold, fixed by the record."""
    letters = LETTERS[: len(record.choices)]
    others = [x for x in letters if x != record.gold]
    first = others[record.index % len(others)]
    second = others[(record.index + 1) % len(others)]
    return first, second


def _thousands(value: Fraction, separator: str) -> Optional[str]:
    """An integer of four or more digits with a thousands separator, or None."""
    if value.denominator != 1 or abs(value) < 1000:
        return None
    digits = f"{abs(value.numerator):,}".replace(",", separator)
    return ("-" if value < 0 else "") + digits


def _scale_words(value: Fraction) -> Optional[str]:
    """ "1.45 million" / "18 thousand" when the value is a round multiple, or None."""
    for word, scale in (("billion", 10**9), ("million", 10**6), ("thousand", 10**3)):
        if abs(value) >= scale and (value / scale * 100).denominator == 1:
            return f"{_written(value / scale)} {word}"
    return None


def _sympy_text(gold: str) -> Optional[str]:
    """The gold as sympy prints it ("9*pi", "3/4", "Interval.Lopen(2, 5)"), via math-verify's parser."""
    from math_verify import parse

    try:
        parsed = parse(f"${gold}$")
    except Exception:  # noqa: BLE001 - the parser gives up on some answers
        return None
    return str(parsed[0]) if parsed else None


def _repeating_fraction(value: Fraction, places: int) -> Optional[Fraction]:
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


# ---------------------------------------------------------------------------------------------
# the forms: each takes (record, wrong value, pool) and returns a Rendering


def _working(record: Record) -> str:
    numbers = re.findall(r"\d+(?:\.\d+)?", record.question)[:2]
    if len(numbers) == 2:
        return f"We combine {numbers[0]} and {numbers[1]} as the question says."
    return "We work through the question step by step."


def _choice_parts(record: Record) -> tuple[str, str, str, str]:
    gold = record.gold
    other, third = _other_letters(record)
    return gold, record.choices[LETTERS.index(gold)], other, third


def form_answer_is(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nThe answer is ({record.gold}).", "right")
    return Rendering(f"{_working(record)}\nThe answer is {_gold_text(record)}.", "right")


def form_boxed(record, wrong, pool):
    return Rendering(f"{_working(record)}\nSo the final answer is $\\boxed{{{_gold_text(record)}}}$.", "right")


def form_hash(record, wrong, pool):
    return Rendering(f"{_working(record)}\n#### {_gold_text(record)}", "right")


def form_wrong_value(record, wrong, pool):
    if record.kind == "choice":
        other = _other_letters(record)[0]
        return Rendering(f"{_working(record)}\nThe answer is ({other}).", "wrong")
    return Rendering(f"{_working(record)}\nThe answer is {wrong}.", "wrong")


def form_hedge_or(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        first, second = (other, gold) if record.index % 2 else (gold, other)
        return Rendering(f"{_working(record)}\nThe answer is {first} or {second}.", "hedge")
    return Rendering(f"{_working(record)}\nThe answer is {_gold_text(record)} or {wrong}.", "hedge")


def form_hedge_two_boxes(record, wrong, pool):
    gold = _gold_text(record)
    other = _other_letters(record)[0] if record.kind == "choice" else wrong
    if record.kind == "numbers":  # two boxes are two unknowns there: the hedge says "or"
        return Rendering(f"{_working(record)}\n$\\boxed{{{other}}}$ or $\\boxed{{{gold}}}$", "hedge")
    return Rendering(f"{_working(record)}\n\\boxed{{{other}}} \\boxed{{{gold}}}", "hedge")


def form_answer_statement(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nAnswer: The correct option is {record.gold}", "right")
    return Rendering(f"{_working(record)}\nAnswer: The result comes to ${_gold_text(record)}$.", "right")


def form_thousands_latex(record, wrong, pool):
    value = _plain_value(record)
    text = _thousands(value, "{,}") if value is not None else None
    if text is None:
        return form_boxed(record, wrong, pool) if record.kind != "choice" else _letter_boxed(record)
    return Rendering(f"{_working(record)}\nThe total is $\\boxed{{{text}}}$.", "right")


def _letter_boxed(record):
    return Rendering(f"{_working(record)}\n$\\boxed{{\\text{{{record.gold}}}}}$", "right")


def form_program_sympy(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{record.gold}\n", "right", "program")
    value = _plain_value(record)
    if value is not None:
        if record.kind == "numbers":
            return Rendering(f"{{x: {_written(value)}, y: {_written(value + 7)}}}\n", "right", "program")
        return Rendering(f"{float(value):.15f}\n", "right", "program")
    text = _sympy_text(_gold_text(record))
    if text is None:
        return Rendering(f"{_gold_text(record)}\n", "right", "program")
    return Rendering(f"{text}\n", "right", "program")


def form_units(record, wrong, pool):
    if record.kind == "choice":
        gold, option, _, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nThe answer is {gold}) {option}", "right")
    gold = _gold_text(record)
    if record.kind == "math":
        if _plain_value(record) is None:
            return Rendering(f"{_working(record)}\nThe answer is $\\boxed{{{gold}}}$.", "right")
        return Rendering(f"{_working(record)}\nThe answer is $\\boxed{{{gold} \\text{{ units}}}}$.", "right")
    return Rendering(f"{_working(record)}\nThe answer is ${gold} in total.", "right")


def form_elimination(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, third = _choice_parts(record)
        text = f"Option ({other}) is wrong because it is too large, and ({third}) is not possible either.\n"
        return Rendering(f"{_working(record)}\n{text}The answer is ({gold}).", "right")
    return Rendering(f"{_working(record)}\nIt is not {wrong}.\nThe answer is {_gold_text(record)}.", "right")


def form_echo_only(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nOptions: {choices_text(record.choices)}", "no_answer")
    return Rendering(f"{_working(record)}\nI cannot finish this computation.", "no_answer")


def form_scale_words(record, wrong, pool):
    value = _plain_value(record)
    words = _scale_words(value) if value is not None else None
    if words is None:
        return form_answer_is(record, wrong, pool)
    return Rendering(f"{_working(record)}\nThe answer is {words}.", "right")


def form_rounding(record, wrong, pool):
    """A repeating decimal's gold as the model's 2-place rounding; any other number with two zeros."""
    value = _plain_value(record)
    if value is None:
        return form_answer_is(record, wrong, pool)
    gold = _gold_text(record)
    places = len(gold.split(".")[1]) if "." in gold else 0
    exact = _repeating_fraction(value, places) if places >= 2 else None
    if exact is not None and places > 2:
        return Rendering(f"{_working(record)}\nThe answer is {_decimal(exact, 2)}.", "right")
    if places == 0:
        return Rendering(f"{_working(record)}\nThe answer is {gold}.00.", "right")
    return Rendering(f"{_working(record)}\nThe answer is {gold}0.", "right")


# forms held out in the first round (their disagreements were then looked at: now development forms)


def form_answer_first(record, wrong, pool):
    """The answer first, its working after it in parentheses, no answer phrase."""
    if record.kind == "choice":
        gold, option, _, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nSo ({gold}) {option} it is (checking 2 + 3 = 5 along the way).", "right")
    if record.kind == "math":
        return Rendering(
            f"{_working(record)}\nSo we get ${_gold_text(record)}$ (using 2 + 3 = 5 and 4 * 6 = 24).", "right"
        )
    return Rendering(
        f"{_working(record)}\nSo the result is {_gold_text(record)} (she sells 9 eggs at $2 each).", "right"
    )


def form_hedge_maybe(record, wrong, pool):
    gold = _gold_text(record)
    other = _other_letters(record)[0] if record.kind == "choice" else wrong
    return Rendering(f"{_working(record)}\n$\\boxed{{{other}}}$ or maybe $\\boxed{{{gold}}}$", "hedge")


def form_hedge_either(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nThe answer is either ({other}) or ({gold}).", "hedge")
    return Rendering(f"{_working(record)}\nThe answer is {wrong} and/or {_gold_text(record)}.", "hedge")


def form_thousands_space(record, wrong, pool):
    value = _plain_value(record)
    text = _thousands(value, " ") if value is not None else None
    if text is None:
        if record.kind == "choice":
            return Rendering(f"{_working(record)}\nAnswer: {record.gold}", "right")
        return Rendering(f"{_working(record)}\nAnswer: {_gold_text(record)}", "right")
    return Rendering(f"{_working(record)}\nAnswer: {text}", "right")


def form_program_label(record, wrong, pool):
    """A program whose last print is a label, not the answer."""
    if record.kind == "choice":
        return Rendering(f"Answer: {record.gold}\nDone.\n", "right", "program")
    return Rendering(f"{_gold_text(record)}\nThat is the answer.\n", "right", "program")


def form_program_values(record, wrong, pool):
    """A program printing several values on one line, the answer among them."""
    value = _plain_value(record)
    if record.kind == "numbers" and value is not None:
        return Rendering(f"{_written(value)} {_written(value + 2)}\n", "right", "program")
    if record.kind == "number" and value is not None:
        return Rendering(f"total = {_gold_text(record)}\n", "right", "program")
    if record.kind == "choice":
        return Rendering(f"The correct option is {record.gold}\n", "right", "program")
    return Rendering(f"answer: {_gold_text(record)}\n", "right", "program")


def form_interval_or_wrong_option(record, wrong, pool):
    """MATH intervals as inequalities; elsewhere the wrong option's text / a wrong rounding."""
    if record.kind == "math":
        inequality = _as_inequality(record.gold)
        if inequality is not None:
            return Rendering(f"{_working(record)}\nThe answer is ${inequality}$.", "right")
    if record.kind == "choice":
        other = _other_letters(record)[0]
        return Rendering(f"{_working(record)}\nThe answer is {record.choices[LETTERS.index(other)]}", "wrong")
    return Rendering(f"{_working(record)}\nThe final answer is {wrong}.", "wrong")


_GREATER = {"[": "\\ge", "(": ">"}
_INTERVAL = re.compile(r"([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])")


def _as_inequality(gold: str) -> Optional[str]:
    """``(2, 5]`` -> ``2 < x \\le 5``; ``[0,\\infty)`` -> ``x \\ge 0``; None for other answers."""
    match = _INTERVAL.fullmatch(gold.strip())
    if not match or "\\cup" in gold:
        return None
    left, low, high, right = match.groups()
    low_op = "\\le" if left == "[" else "<"
    high_op = "\\le" if right == "]" else "<"
    if "infty" in low and "infty" in high:
        return None
    if "infty" in low:
        return f"x {high_op} {high}"
    if "infty" in high:
        return f"x {_GREATER[left]} {low}"
    return f"{low} {low_op} x {high_op} {high}"


# forms held out in the second round (written after the first round's rules, scored once before
# any rule was changed for them)

_WORDS = re.findall(
    r"\w+", "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
) + ["seventeen", "eighteen", "nineteen", "twenty"]


def form_final_bold(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\n**Final Answer: ({record.gold})**", "right")
    if record.kind == "math":
        return Rendering(f"{_working(record)}\n**Final Answer:** ${_gold_text(record)}$", "right")
    return Rendering(f"{_working(record)}\n**Final Answer:** {_gold_text(record)}", "right")


def form_therefore(record, wrong, pool):
    if record.kind == "choice":
        gold, option, _, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nTherefore, the correct choice is ({gold}) {option}.", "right")
    if record.kind == "math":
        return Rendering(f"{_working(record)}\nTherefore, the value is ${_gold_text(record)}$.", "right")
    return Rendering(f"{_working(record)}\nTherefore, the total is {_gold_text(record)}.", "right")


def form_hedge_possibly(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nThe answer is ({gold}), or possibly ({other}).", "hedge")
    gold = _gold_text(record)
    if record.kind == "math":
        return Rendering(f"{_working(record)}\nThe answer is ${gold}$ (or possibly ${wrong}$).", "hedge")
    return Rendering(f"{_working(record)}\nThe answer is {gold} (or possibly {wrong}).", "hedge")


def form_hedge_between(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nThe answer is between ({gold}) and ({other}).", "hedge")
    gold = _gold_text(record)
    if record.kind == "math":
        return Rendering(f"{_working(record)}\nThe answer is between ${gold}$ and ${wrong}$.", "hedge")
    return Rendering(f"{_working(record)}\nThe answer is between {gold} and {wrong}.", "hedge")


def form_dollar_latex(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nThe answer is $\\textbf{{({record.gold})}}$.", "right")
    value = _plain_value(record)
    if value is None:
        return Rendering(f"{_working(record)}\nThe answer is ${_gold_text(record)}$.", "right")
    if value < 0:
        return Rendering(f"{_working(record)}\nThe answer is \u2212{_written(-value)}.", "right")
    text = _thousands(value, "{,}") or _written(value)
    return Rendering(f"{_working(record)}\nThe answer is $\\${text}$.", "right")


def form_program_sentence(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"Answer: ({record.gold})\n", "right", "program")
    if record.kind == "math" and _plain_value(record) is None:
        text = _sympy_text(_gold_text(record)) or _gold_text(record)
        return Rendering(f"Result: {text}\n", "right", "program")
    return Rendering(f"The answer is {_gold_text(record)}\n", "right", "program")


def form_program_float(record, wrong, pool):
    """What float arithmetic prints: the nearest double of the exact value."""
    if record.kind == "choice":
        return Rendering(f"{record.gold}\n", "right", "program")
    value = _plain_value(record)
    if value is not None:
        gold = _gold_text(record)
        places = len(gold.split(".")[1]) if "." in gold else 0
        exact = _repeating_fraction(value, places) if places >= 4 else None
        return Rendering(f"{float(exact if exact is not None else value)!r}\n", "right", "program")
    text = _sympy_text(_gold_text(record))
    return Rendering(f"{text or _gold_text(record)}\n", "right", "program")


def form_wrong_close(record, wrong, pool):
    if record.kind == "choice":
        other = _other_letters(record)[1]
        return Rendering(f"{_working(record)}\nThe answer is ({other}) {record.choices[LETTERS.index(other)]}", "wrong")
    value = _plain_value(record)
    if value is not None and value != 0:
        return Rendering(f"{_working(record)}\nThe answer is {_written(value * 10)}.", "wrong")
    return Rendering(f"{_working(record)}\nThe answer is ${wrong}$.", "wrong")


def form_correction(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        text = f"The answer is ({other}).\nWait, I made an error in the last step. The answer is ({gold})."
        return Rendering(f"{_working(record)}\n{text}", "right")
    gold = _gold_text(record)
    text = f"The answer is {wrong}.\nWait, I made an error in the last step. The answer is {gold}."
    return Rendering(f"{_working(record)}\n{text}", "right")


def form_number_words(record, wrong, pool):
    value = _plain_value(record)
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nThe answer is option {record.gold}.", "right")
    if value is not None and value.denominator == 1 and 0 <= value <= 20:
        return Rendering(f"{_working(record)}\nThe answer is {_WORDS[int(value)]}.", "right")
    return Rendering(f"{_working(record)}\nThe answer is {_gold_text(record)}.", "right")


def form_refusal(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nI am not able to pick one of the options.", "no_answer")
    return Rendering(f"{_working(record)}\nThere is not enough information to determine the answer.", "no_answer")


# forms held out in the third round (written after the second round's rules; scored once, blind)


def form_hedge_no_phrase(record, wrong, pool):
    """Two values in a final sentence without an answer phrase, the gold last."""
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        return Rendering(f"{_working(record)}\nIt could be ({other}), or it could be ({gold}).", "hedge")
    if record.kind == "math":
        return Rendering(f"{_working(record)}\nIt could be ${wrong}$, or it could be ${_gold_text(record)}$.", "hedge")
    return Rendering(f"{_working(record)}\nIt could be {wrong}, or it could be {_gold_text(record)}.", "hedge")


def form_range(record, wrong, pool):
    """A range of values: a hedge."""
    value = _plain_value(record)
    if record.kind == "choice":
        gold, _, other, _ = _choice_parts(record)
        low, high = sorted((gold, other))
        return Rendering(f"{_working(record)}\nThe answer is somewhere in ({low})-({high}).", "hedge")
    if value is None:
        return Rendering(f"{_working(record)}\nThe answer is ${_gold_text(record)}$ to ${wrong}$.", "hedge")
    return Rendering(f"{_working(record)}\nThe answer is {_written(value)}-{_written(value + 2)}.", "hedge")


def form_math_decimal(record, wrong, pool):
    """A fraction gold as a decimal: exact when it terminates (right), 3 places otherwise (wrong)."""
    match = re.fullmatch(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}", _gold_text(record).strip())
    if record.kind != "math" or not match:
        return form_answer_is(record, wrong, pool)
    value = Fraction(int(match.group(2)), int(match.group(3))) * (-1 if match.group(1) else 1)
    rest = value.denominator
    for prime in (2, 5):
        while rest % prime == 0:
            rest //= prime
    if rest == 1:
        return Rendering(f"{_working(record)}\nThe answer is {_written(value)}.", "right")
    return Rendering(f"{_working(record)}\nThe answer is {_decimal(value, 3)}.", "wrong")


def form_cents(record, wrong, pool):
    """A dollar amount given in cents when the question counts dollars."""
    value = _plain_value(record)
    money = "$" in record.question and "cent" not in record.question.lower()
    if record.kind != "number" or value is None or not money:
        return form_answer_is(record, wrong, pool)
    return Rendering(f"{_working(record)}\nThe answer is {_written(value * 100)} cents.", "right")


def form_answer_then_check(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"The answer is ({record.gold}).\nCheck: 2 + 3 = 5 and 7 - 4 = 3, consistent.", "right")
    return Rendering(f"The answer is {_gold_text(record)}.\nCheck: 2 + 3 = 5 and 7 - 4 = 3, consistent.", "right")


def form_lowercase_letter(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{_working(record)}\nthe answer is ({record.gold.lower()})", "right")
    return Rendering(f"{_working(record)}\nthe answer is {_gold_text(record)}", "right")


def form_program_list(record, wrong, pool):
    """A program printing a one-element list (sympy's solve, a list comprehension)."""
    if record.kind == "choice":
        return Rendering(f"['{record.gold}']\n", "right", "program")
    value = _plain_value(record)
    if value is not None:
        return Rendering(f"[{_written(value)}]\n", "right", "program")
    text = _sympy_text(_gold_text(record))
    return Rendering(f"[{text or _gold_text(record)}]\n", "right", "program")


def form_wrong_sign(record, wrong, pool):
    value = _plain_value(record)
    if record.kind == "choice" or value is None or value == 0:
        return form_wrong_value(record, wrong, pool)
    return Rendering(f"{_working(record)}\nThe answer is {_written(-value)}.", "wrong")


Form = Callable[[Record, str, Sequence[Record]], Rendering]
DEVELOPMENT_FORMS: dict[str, Form] = {
    "answer_is": form_answer_is,
    "boxed": form_boxed,
    "hash": form_hash,
    "wrong_value": form_wrong_value,
    "hedge_or": form_hedge_or,
    "hedge_two_boxes": form_hedge_two_boxes,
    "answer_statement": form_answer_statement,
    "thousands_latex": form_thousands_latex,
    "program_sympy": form_program_sympy,
    "units": form_units,
    "elimination": form_elimination,
    "echo_only": form_echo_only,
    "scale_words": form_scale_words,
    "rounding": form_rounding,
    "answer_first": form_answer_first,
    "hedge_maybe": form_hedge_maybe,
    "hedge_either": form_hedge_either,
    "thousands_space": form_thousands_space,
    "program_label": form_program_label,
    "program_values": form_program_values,
    "interval_or_wrong_option": form_interval_or_wrong_option,
}
HELD_OUT_FORMS: dict[str, Form] = {
    "final_bold": form_final_bold,
    "therefore": form_therefore,
    "hedge_possibly": form_hedge_possibly,
    "hedge_between": form_hedge_between,
    "dollar_latex": form_dollar_latex,
    "program_sentence": form_program_sentence,
    "program_float": form_program_float,
    "wrong_close": form_wrong_close,
    "correction": form_correction,
    "number_words": form_number_words,
    "refusal": form_refusal,
    "hedge_no_phrase": form_hedge_no_phrase,
    "range": form_range,
    "math_decimal": form_math_decimal,
    "cents": form_cents,
    "answer_then_check": form_answer_then_check,
    "lowercase_letter": form_lowercase_letter,
    "program_list": form_program_list,
    "wrong_sign": form_wrong_sign,
}
ROUND_3_FORMS = tuple(list(HELD_OUT_FORMS)[-8:])  # scored once blind (docs/grading.md)
FORMS: dict[str, Form] = {**DEVELOPMENT_FORMS, **HELD_OUT_FORMS}


def sample_records(records: Sequence[Record], problems: int, seed: int = 0) -> list[Record]:
    """``problems`` records (all when fewer), a fixed-seed sample in file order."""
    if len(records) <= problems:
        return list(records)
    chosen = random.Random(seed).sample(range(len(records)), problems)
    return [records[i] for i in sorted(chosen)]


def build_corpus(records: Sequence[Record], problems: int = 300, seed: int = 0) -> list[CorpusItem]:
    """Every form for each of ``problems`` sampled records of one benchmark."""
    chosen = sample_records(records, problems, seed)
    items = []
    for record in chosen:
        wrong = _wrong_value(record, chosen) if record.kind != "choice" else ""
        for name, form in FORMS.items():
            rendering = form(record, wrong, chosen)
            items.append(
                CorpusItem(
                    record.benchmark,
                    record.index,
                    name,
                    rendering.label,
                    rendering.channel,
                    rendering.output,
                    name in HELD_OUT_FORMS,
                )
            )
    return items
