"""The held-out forms of the grader-check corpus: written together with the development forms before
any scoring rule was changed for them, their disagreements not looked at while the rules were
changed; their agreement is reported on its own (docs/grading.md). Round 2's forms were scored once
before any rule was changed for them, round 3's (:data:`ROUND_3_FORMS`) once, blind.
:data:`HELD_OUT_FORMS` names them.
"""

from __future__ import annotations

import re
from fractions import Fraction

from del_core.evaluation.grader_check.development_forms import form_answer_is, form_wrong_value
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
    sympy_text,
    thousands_text,
    working,
)
from del_core.evaluation.question import LETTERS

# forms held out in the second round (written after the first round's rules, scored once before
# any rule was changed for them)

_WORDS = re.findall(
    r"\w+", "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
) + ["seventeen", "eighteen", "nineteen", "twenty"]


def form_final_bold(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\n**Final Answer: ({record.gold})**", "right")
    if record.kind == "math":
        return Rendering(f"{working(record)}\n**Final Answer:** ${gold_text(record)}$", "right")
    return Rendering(f"{working(record)}\n**Final Answer:** {gold_text(record)}", "right")


def form_therefore(record, wrong, pool):
    if record.kind == "choice":
        gold, option, _, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nTherefore, the correct choice is ({gold}) {option}.", "right")
    if record.kind == "math":
        return Rendering(f"{working(record)}\nTherefore, the value is ${gold_text(record)}$.", "right")
    return Rendering(f"{working(record)}\nTherefore, the total is {gold_text(record)}.", "right")


def form_hedge_possibly(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nThe answer is ({gold}), or possibly ({other}).", "hedge")
    gold = gold_text(record)
    if record.kind == "math":
        return Rendering(f"{working(record)}\nThe answer is ${gold}$ (or possibly ${wrong}$).", "hedge")
    return Rendering(f"{working(record)}\nThe answer is {gold} (or possibly {wrong}).", "hedge")


def form_hedge_between(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nThe answer is between ({gold}) and ({other}).", "hedge")
    gold = gold_text(record)
    if record.kind == "math":
        return Rendering(f"{working(record)}\nThe answer is between ${gold}$ and ${wrong}$.", "hedge")
    return Rendering(f"{working(record)}\nThe answer is between {gold} and {wrong}.", "hedge")


def form_dollar_latex(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nThe answer is $\\textbf{{({record.gold})}}$.", "right")
    value = gold_value(record)
    if value is None:
        return Rendering(f"{working(record)}\nThe answer is ${gold_text(record)}$.", "right")
    if value < 0:
        return Rendering(f"{working(record)}\nThe answer is \u2212{number_text(-value)}.", "right")
    text = thousands_text(value, "{,}") or number_text(value)
    return Rendering(f"{working(record)}\nThe answer is $\\${text}$.", "right")


def form_program_sentence(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"Answer: ({record.gold})\n", "right", "program")
    if record.kind == "math" and gold_value(record) is None:
        text = sympy_text(gold_text(record)) or gold_text(record)
        return Rendering(f"Result: {text}\n", "right", "program")
    return Rendering(f"The answer is {gold_text(record)}\n", "right", "program")


def form_program_float(record, wrong, pool):
    """What float arithmetic prints: the nearest double of the exact value."""
    if record.kind == "choice":
        return Rendering(f"{record.gold}\n", "right", "program")
    value = gold_value(record)
    if value is not None:
        gold = gold_text(record)
        places = len(gold.split(".")[1]) if "." in gold else 0
        exact = repeating_fraction(value, places) if places >= 4 else None
        return Rendering(f"{float(exact if exact is not None else value)!r}\n", "right", "program")
    text = sympy_text(gold_text(record))
    return Rendering(f"{text or gold_text(record)}\n", "right", "program")


def form_wrong_close(record, wrong, pool):
    if record.kind == "choice":
        other = other_letters(record)[1]
        return Rendering(f"{working(record)}\nThe answer is ({other}) {record.choices[LETTERS.index(other)]}", "wrong")
    value = gold_value(record)
    if value is not None and value != 0:
        return Rendering(f"{working(record)}\nThe answer is {number_text(value * 10)}.", "wrong")
    return Rendering(f"{working(record)}\nThe answer is ${wrong}$.", "wrong")


def form_correction(record, wrong, pool):
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        text = f"The answer is ({other}).\nWait, I made an error in the last step. The answer is ({gold})."
        return Rendering(f"{working(record)}\n{text}", "right")
    gold = gold_text(record)
    text = f"The answer is {wrong}.\nWait, I made an error in the last step. The answer is {gold}."
    return Rendering(f"{working(record)}\n{text}", "right")


def form_number_words(record, wrong, pool):
    value = gold_value(record)
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nThe answer is option {record.gold}.", "right")
    if value is not None and value.denominator == 1 and 0 <= value <= 20:
        return Rendering(f"{working(record)}\nThe answer is {_WORDS[int(value)]}.", "right")
    return Rendering(f"{working(record)}\nThe answer is {gold_text(record)}.", "right")


def form_refusal(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nI am not able to pick one of the options.", "no_answer")
    return Rendering(f"{working(record)}\nThere is not enough information to determine the answer.", "no_answer")


# forms held out in the third round (written after the second round's rules; scored once, blind)


def form_hedge_no_phrase(record, wrong, pool):
    """Two values in a final sentence without an answer phrase, the gold last."""
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        return Rendering(f"{working(record)}\nIt could be ({other}), or it could be ({gold}).", "hedge")
    if record.kind == "math":
        return Rendering(f"{working(record)}\nIt could be ${wrong}$, or it could be ${gold_text(record)}$.", "hedge")
    return Rendering(f"{working(record)}\nIt could be {wrong}, or it could be {gold_text(record)}.", "hedge")


def form_range(record, wrong, pool):
    """A range of values: a hedge."""
    value = gold_value(record)
    if record.kind == "choice":
        gold, _, other, _ = choice_parts(record)
        low, high = sorted((gold, other))
        return Rendering(f"{working(record)}\nThe answer is somewhere in ({low})-({high}).", "hedge")
    if value is None:
        return Rendering(f"{working(record)}\nThe answer is ${gold_text(record)}$ to ${wrong}$.", "hedge")
    return Rendering(f"{working(record)}\nThe answer is {number_text(value)}-{number_text(value + 2)}.", "hedge")


def form_math_decimal(record, wrong, pool):
    """A fraction gold as a decimal: exact when it terminates (right), 3 places otherwise (wrong)."""
    match = re.fullmatch(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}", gold_text(record).strip())
    if record.kind != "math" or not match:
        return form_answer_is(record, wrong, pool)
    value = Fraction(int(match.group(2)), int(match.group(3))) * (-1 if match.group(1) else 1)
    rest = value.denominator
    for prime in (2, 5):
        while rest % prime == 0:
            rest //= prime
    if rest == 1:
        return Rendering(f"{working(record)}\nThe answer is {number_text(value)}.", "right")
    return Rendering(f"{working(record)}\nThe answer is {rounded_text(value, 3)}.", "wrong")


def form_cents(record, wrong, pool):
    """A dollar amount given in cents when the question counts dollars."""
    value = gold_value(record)
    money = "$" in record.question and "cent" not in record.question.lower()
    if record.kind != "number" or value is None or not money:
        return form_answer_is(record, wrong, pool)
    return Rendering(f"{working(record)}\nThe answer is {number_text(value * 100)} cents.", "right")


def form_answer_then_check(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"The answer is ({record.gold}).\nCheck: 2 + 3 = 5 and 7 - 4 = 3, consistent.", "right")
    return Rendering(f"The answer is {gold_text(record)}.\nCheck: 2 + 3 = 5 and 7 - 4 = 3, consistent.", "right")


def form_lowercase_letter(record, wrong, pool):
    if record.kind == "choice":
        return Rendering(f"{working(record)}\nthe answer is ({record.gold.lower()})", "right")
    return Rendering(f"{working(record)}\nthe answer is {gold_text(record)}", "right")


def form_program_list(record, wrong, pool):
    """A program printing a one-element list (sympy's solve, a list comprehension)."""
    if record.kind == "choice":
        return Rendering(f"['{record.gold}']\n", "right", "program")
    value = gold_value(record)
    if value is not None:
        return Rendering(f"[{number_text(value)}]\n", "right", "program")
    text = sympy_text(gold_text(record))
    return Rendering(f"[{text or gold_text(record)}]\n", "right", "program")


def form_wrong_sign(record, wrong, pool):
    value = gold_value(record)
    if record.kind == "choice" or value is None or value == 0:
        return form_wrong_value(record, wrong, pool)
    return Rendering(f"{working(record)}\nThe answer is {number_text(-value)}.", "wrong")


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
