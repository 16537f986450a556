"""The development forms of the grader-check corpus: the phrasings, renderings, hedges and wrong
values whose disagreements were looked at while the scoring rules were written (round 1's held-out
forms included: they were looked at after round 1). Each form takes (record, wrong value, pool) and
returns a :class:`~del_core.evaluation.grader_check.renderings.Rendering`; :data:`DEVELOPMENT_FORMS`
names them.
"""

from __future__ import annotations

import re
from typing import Optional

from del_core.evaluation.grader_check.renderings import (
    Form,
    Rendering,
    choice_parts,
    gold_text,
    gold_value,
    number_text,
    other_letters,
    repeating_fraction,
    rounded_text,
    scale_words_text,
    sympy_text,
    thousands_text,
    working,
)
from del_core.evaluation.question import LETTERS, choices_text


def form_answer_is(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nThe answer is ({record.gold}).", "right")
    return Rendering(f"{working(record)}\nThe answer is {gold_text(record)}.", "right")


def form_boxed(record, wrong, pool):
    return Rendering(f"{working(record)}\nSo the final answer is $\\boxed{{{gold_text(record)}}}$.", "right")


def form_hash(record, wrong, pool):
    return Rendering(f"{working(record)}\n#### {gold_text(record)}", "right")


def form_wrong_value(record, wrong, pool):
    if record.kind == "choice":
        other = other_letters(record)[0]
        return Rendering(f"{working(record)}\nThe answer is ({other}).", "wrong")
    return Rendering(f"{working(record)}\nThe answer is {wrong}.", "wrong")


def form_hedge_or(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        first, second = (other, gold) if record.index % 2 else (gold, other)
        return Rendering(f"{working(record)}\nThe answer is {first} or {second}.", "hedge")
    return Rendering(f"{working(record)}\nThe answer is {gold_text(record)} or {wrong}.", "hedge")


def form_hedge_two_boxes(record, wrong, pool):
    gold = gold_text(record)
    other = other_letters(record)[0] if record.kind == "choice" else wrong
    if record.kind == "numbers":  # two boxes are two unknowns there: the hedge says "or"
        return Rendering(f"{working(record)}\n$\\boxed{{{other}}}$ or $\\boxed{{{gold}}}$", "hedge")
    return Rendering(f"{working(record)}\n\\boxed{{{other}}} \\boxed{{{gold}}}", "hedge")


def form_answer_statement(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nAnswer: The correct option is {record.gold}", "right")
    return Rendering(f"{working(record)}\nAnswer: The result comes to ${gold_text(record)}$.", "right")


def form_thousands_latex(record, wrong, pool):
    value = gold_value(record)
    text = thousands_text(value, "{,}") if value is not None else None
    if text is None:
        return form_boxed(record, wrong, pool) if record.kind != "choice" else _letter_boxed(record)
    return Rendering(f"{working(record)}\nThe total is $\\boxed{{{text}}}$.", "right")


def _letter_boxed(record):
    return Rendering(f"{working(record)}\n$\\boxed{{\\text{{{record.gold}}}}}$", "right")


def form_program_sympy(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{record.gold}\n", "right", "program")
    value = gold_value(record)
    if value is not None:
        if record.kind == "numbers":
            return Rendering(f"{{x: {number_text(value)}, y: {number_text(value + 7)}}}\n", "right", "program")
        return Rendering(f"{float(value):.15f}\n", "right", "program")
    text = sympy_text(gold_text(record))
    if text is None:
        return Rendering(f"{gold_text(record)}\n", "right", "program")
    return Rendering(f"{text}\n", "right", "program")


def form_units(record, wrong, pool):
    if record.kind == "choice":
        gold, option, _, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nThe answer is {gold}) {option}", "right")
    gold = gold_text(record)
    if record.kind == "math":
        if gold_value(record) is None:
            return Rendering(f"{working(record)}\nThe answer is $\\boxed{{{gold}}}$.", "right")
        return Rendering(f"{working(record)}\nThe answer is $\\boxed{{{gold} \\text{{ units}}}}$.", "right")
    return Rendering(f"{working(record)}\nThe answer is ${gold} in total.", "right")


def form_elimination(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, third = choice_parts(record)
        text = f"Option ({other}) is wrong because it is too large, and ({third}) is not possible either.\n"
        return Rendering(f"{working(record)}\n{text}The answer is ({gold}).", "right")
    return Rendering(f"{working(record)}\nIt is not {wrong}.\nThe answer is {gold_text(record)}.", "right")


def form_echo_only(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nOptions: {choices_text(record.choices)}", "no_answer")
    return Rendering(f"{working(record)}\nI cannot finish this computation.", "no_answer")


def form_scale_words(record, wrong, pool):
    value = gold_value(record)
    words = scale_words_text(value) if value is not None else None
    if words is None:
        return form_answer_is(record, wrong, pool)
    return Rendering(f"{working(record)}\nThe answer is {words}.", "right")


def form_rounding(record, wrong, pool):
    """A repeating decimal's gold as the model's 2-place rounding; any other number with two zeros."""
    value = gold_value(record)
    if value is None:
        return form_answer_is(record, wrong, pool)
    gold = gold_text(record)
    places = len(gold.split(".")[1]) if "." in gold else 0
    exact = repeating_fraction(value, places) if places >= 2 else None
    if exact is not None and places > 2:
        return Rendering(f"{working(record)}\nThe answer is {rounded_text(exact, 2)}.", "right")
    if places == 0:
        return Rendering(f"{working(record)}\nThe answer is {gold}.00.", "right")
    return Rendering(f"{working(record)}\nThe answer is {gold}0.", "right")


# forms held out in the first round (their disagreements were then looked at: now development forms)


def form_answer_first(record, wrong, pool):
    """The answer first, its working after it in parentheses, no answer phrase."""
    if record.kind == "choice":
        gold, option, _, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nSo ({gold}) {option} it is (checking 2 + 3 = 5 along the way).", "right")
    if record.kind == "math":
        return Rendering(
            f"{working(record)}\nSo we get ${gold_text(record)}$ (using 2 + 3 = 5 and 4 * 6 = 24).", "right"
        )
    return Rendering(f"{working(record)}\nSo the result is {gold_text(record)} (she sells 9 eggs at $2 each).", "right")


def form_hedge_maybe(record, wrong, pool):
    gold = gold_text(record)
    other = other_letters(record)[0] if record.kind == "choice" else wrong
    return Rendering(f"{working(record)}\n$\\boxed{{{other}}}$ or maybe $\\boxed{{{gold}}}$", "hedge")


def form_hedge_either(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nThe answer is either ({other}) or ({gold}).", "hedge")
    return Rendering(f"{working(record)}\nThe answer is {wrong} and/or {gold_text(record)}.", "hedge")


def form_thousands_space(record, wrong, pool):
    value = gold_value(record)
    text = thousands_text(value, " ") if value is not None else None
    if text is None:
        if record.kind == "choice":
            return Rendering(f"{working(record)}\nAnswer: {record.gold}", "right")
        return Rendering(f"{working(record)}\nAnswer: {gold_text(record)}", "right")
    return Rendering(f"{working(record)}\nAnswer: {text}", "right")


def form_program_label(record, wrong, pool):
    """A program whose last print is a label, not the answer."""
    if record.kind == "choice":
        return Rendering(f"Answer: {record.gold}\nDone.\n", "right", "program")
    return Rendering(f"{gold_text(record)}\nThat is the answer.\n", "right", "program")


def form_program_values(record, wrong, pool):
    """A program printing several values on one line, the answer among them."""
    value = gold_value(record)
    if record.kind == "numbers" and value is not None:
        return Rendering(f"{number_text(value)} {number_text(value + 2)}\n", "right", "program")
    if record.kind == "number" and value is not None:
        return Rendering(f"total = {gold_text(record)}\n", "right", "program")
    if record.kind == "choice":
        return Rendering(f"The correct option is {record.gold}\n", "right", "program")
    return Rendering(f"answer: {gold_text(record)}\n", "right", "program")


def form_interval_or_wrong_option(record, wrong, pool):
    """MATH intervals as inequalities; elsewhere the wrong option's text / a wrong rounding."""
    if record.kind == "math":
        inequality = _as_inequality(record.gold)
        if inequality is not None:
            return Rendering(f"{working(record)}\nThe answer is ${inequality}$.", "right")
    if record.kind == "choice":
        other = other_letters(record)[0]
        return Rendering(f"{working(record)}\nThe answer is {record.choices[LETTERS.index(other)]}", "wrong")
    return Rendering(f"{working(record)}\nThe final answer is {wrong}.", "wrong")


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
