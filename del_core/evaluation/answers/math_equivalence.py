"""Equivalence of two MATH answers written in LaTeX.

:func:`math_equivalent` decides, in order:
  0. both answers end in a unit text (``\\text{ p.m.}``, ``\\text{ cm}``) that differs: not equal (a
     unit written on one side only is forgiven);
  1. equal after normalisation (:func:`normalise`: ``\\left``/``\\right``, ``\\dfrac``/``\\tfrac``,
     ``\\text{}`` around a word answer, a trailing unit word after a number, degrees, dollars,
     spacing, ``\\frac12``, ``\\sqrt2``, "x = 5", a trailing "."; matrix row separators ``\\\\``
     are kept);
  2. when both sides are plain numbers: the project's number rule (``numbers.numbers_match``, the
     same rule as GSM8K's, so "0.25" is not "0.3");
  3. otherwise ``math-verify`` (the equivalence engine of TRL's accuracy reward): both sides parsed
     from LaTeX into sympy (matrices, intervals, sets, tuples, equations, percentages), compared
     with the gold first. Sets and bare comma lists ("all solutions") compare in any order,
     tuples, vectors and matrices in order, intervals with their open/closed ends. Each parse and
     comparison runs under a wall-clock limit (``SYMPY_SECONDS``; ITIMER_REAL, so only in the main
     thread: elsewhere it runs unlimited). math-verify turns LaTeX into sympy without ``eval``;
     its plain-expression reader only accepts digits and arithmetic operators.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import Optional

from del_core.evaluation.answers.numbers import numbers_match, parse_number

SYMPY_SECONDS = 3.0
_ROW_BREAK = "\x00"  # stands for a matrix row separator while the rest is normalised
# math-verify warns on every call made without its own (signal) timeout; ours is time_limit.
logging.getLogger("math_verify").setLevel(logging.ERROR)


class _TimeUp(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Raise ``_TimeUp`` in the block after ``seconds`` (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise _TimeUp()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _braced(text: str, start: int) -> tuple[Optional[str], int]:
    """(content of the {..} group opening at ``start``, index after it); a bare single character
    or command counts as a group (``\\frac12``, ``\\frac\\pi4``)."""
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text):
        return None, start
    command = re.match(r"\\[a-zA-Z]+", text[start:])
    if command:
        return command.group(0), start + command.end()
    if text[start] != "{":
        return text[start], start + 1
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i], i + 1
    return None, start


def _rewrite_command(text: str, command: str, arity: int, build) -> str:
    """Replace ``\\command{a}{b}`` (``arity`` groups) by ``build(a, b)``, innermost-safe."""
    out, i = [], 0
    pattern = re.compile(re.escape(command) + r"(?![a-zA-Z])")
    while True:
        match = pattern.search(text, i)
        if not match:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : match.start()])
        args, j = [], match.end()
        for _ in range(arity):
            arg, j = _braced(text, j)
            if arg is None:
                break
            args.append(_rewrite_command(arg, command, arity, build))
        if len(args) < arity:
            out.append(text[match.start() : match.end()])
            i = match.end()
            continue
        out.append(build(*args))
        i = j


def normalise(answer: str) -> str:
    """A canonical text of a LaTeX answer (see the module docstring)."""
    s = str(answer).strip().replace("\n", "").replace("\\\\", _ROW_BREAK)
    s = s.replace("\\!", "").replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°", "", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\\(?:,|;|:| )|~", "", s)
    s = re.sub(r"\\text\{\s*(?:[a-zA-Z]+\s*)+(?:\^\d)?\}\s*$", "", s) if re.search(r"[\d}]\s*\\text\{", s) else s
    for command in ("\\text", "\\textbf", "\\mbox", "\\mathrm", "\\mathbf", "\\operatorname"):
        s = _rewrite_command(s, command, 1, lambda a: a)
    s = s.replace("\\{", "{").replace("\\}", "}") if s.startswith("\\{") else s
    s = _explicit_groups(s).replace(" ", "")
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    match = re.fullmatch(r"-?(\d+)/(\d+)", s)
    if match:
        s = ("-" if s.startswith("-") else "") + "\\frac{" + match.group(1) + "}{" + match.group(2) + "}"
    parts = s.split("=")
    if len(parts) == 2 and re.fullmatch(r"[a-zA-Z](_\d|_\{\d\})?|\\[a-z]+", parts[0]):
        s = parts[1]
    return s.rstrip(".").replace(_ROW_BREAK, "\\\\")


def _explicit_groups(text: str) -> str:
    """``\\frac`` and ``\\sqrt`` with braced arguments (``\\frac \\pi4`` -> ``\\frac{\\pi}{4}``), which
    math-verify's parser misreads otherwise."""
    text = _rewrite_command(text, "\\sqrt", 1, lambda a: "\\sqrt{" + a + "}")
    return _rewrite_command(text, "\\frac", 2, lambda a, b: "\\frac{" + a + "}{" + b + "}")


def _latex(text: str) -> str:
    """The answer as one LaTeX math span for math-verify's parser."""
    return "$" + _explicit_groups(str(text).strip().strip("$").strip()) + "$"


@lru_cache(maxsize=16384)
def _parsed(text: str) -> tuple:
    """math-verify's parse of one answer (empty when it does not parse), cached: a gold is parsed once."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    try:
        with time_limit(SYMPY_SECONDS):
            return tuple(
                parse(
                    _latex(text),
                    extraction_config=(LatexExtractionConfig(), ExprExtractionConfig()),
                    parsing_timeout=None,
                )
            )
    except _TimeUp:
        return ()


def verified_equal(prediction: str, gold: str) -> bool:
    """math-verify's verdict on ``prediction`` against ``gold`` (False when either does not parse
    or the comparison runs out of time)."""
    from math_verify import verify

    parsed_gold, parsed_prediction = _parsed(gold), _parsed(prediction)
    if not parsed_gold or not parsed_prediction:
        return False
    try:
        with time_limit(SYMPY_SECONDS):
            return bool(verify(list(parsed_gold), list(parsed_prediction), timeout_seconds=None))
    except _TimeUp:
        return False


_TRAILING_UNIT = re.compile(r"\\(?:text|mbox|mathrm)\{([^{}]*[a-zA-Z][^{}]*)\}\s*(?:\^\s*\{?\d\}?)?\s*\.?\s*$")


_UNIT_SPELLINGS = {
    "ft": "feet", "foot": "feet", "in": "inch", "inche": "inch", "yd": "yard", "mi": "mile",
    "cm": "centimeter", "mm": "millimeter", "m": "meter", "km": "kilometer", "sq": "square",
    "hr": "hour", "h": "hour", "min": "minute", "sec": "second", "s": "second", "deg": "degree",
    "metre": "meter", "centimetre": "centimeter", "kilometre": "kilometer",
}  # fmt: skip


def unit_words(answer: str) -> str:
    """The unit a LaTeX answer ends in, one spelling per unit (``9\\text{ p.m.}`` -> "pm",
    ``5\\text{ sq ft}^2`` -> "square feet"); "" when none."""
    match = _TRAILING_UNIT.search(str(answer))
    if not match:
        return ""
    words = re.findall(r"[a-z]+", match.group(1).lower().replace(".", ""))
    words = [re.sub(r"(?<=[a-z]{2})s$", "", word) for word in words]
    return " ".join(_UNIT_SPELLINGS.get(word, word) for word in words)


_LESS = r"(<|\\le(?:q|qslant)?(?![a-z])|≤)"
_GREATER = r"(>|\\ge(?:q|qslant)?(?![a-z])|≥)"
_VARIABLE = r"[a-zA-Z]"


def inequality_as_interval(text: str) -> Optional[str]:
    """An inequality in one variable as the interval it describes ("2 < x \\le 5" -> "(2,5]",
    "x \\ge 0" -> ``[0,\\infty)``; parts joined by "or" -> their union), or None."""
    parts = re.split(r"\\text\{\s*or\s*\}|\bor\b|\\lor|\\vee|\\cup", str(text).strip().strip("$"))
    intervals = [_one_inequality(part.strip().strip(",")) for part in parts]
    return None if any(i is None for i in intervals) else "\\cup".join(intervals)


def _one_inequality(text: str) -> Optional[str]:
    closed = lambda op: not op.startswith("<") and not op.startswith(">")  # noqa: E731
    both = re.fullmatch(rf"(.+?){_LESS}\s*{_VARIABLE}\s*{_LESS}(.+)", text)
    if both:
        low, op1, op2, high = both.groups()
        return f"{'[' if closed(op1) else '('}{low.strip()},{high.strip()}{']' if closed(op2) else ')'}"
    upper = re.fullmatch(rf"{_VARIABLE}\s*{_LESS}(.+)", text)
    if upper:
        return f"(-\\infty,{upper.group(2).strip()}{']' if closed(upper.group(1)) else ')'}"
    lower = re.fullmatch(rf"{_VARIABLE}\s*{_GREATER}(.+)", text)
    if lower:
        return f"{'[' if closed(lower.group(1)) else '('}{lower.group(2).strip()},\\infty)"
    return None


def math_equivalent(prediction: Optional[str], gold: str) -> bool:
    """Whether ``prediction`` answers a MATH question whose gold answer is ``gold``."""
    if prediction is None or not str(prediction).strip():
        return False
    units = unit_words(prediction), unit_words(gold)
    if all(units) and units[0] != units[1]:  # "9 p.m." is not "9 a.m."; a missing unit is forgiven
        return False
    spoken = re.fullmatch(r"\s*\$?(-?[\d.,]+\s+(?:thousand|million|billion|trillion))\$?\s*", str(prediction))
    if spoken and parse_number(gold) is not None:  # "4 thousand"
        return numbers_match(spoken.group(1), gold)
    if re.match(r"\s*[\[(]", str(gold)):  # an interval gold: an inequality answers it too
        prediction = inequality_as_interval(prediction) or prediction
    a, b = normalise(prediction), normalise(gold)
    if a == b:
        return True
    if parse_number(a) is not None and parse_number(b) is not None:
        return numbers_match(a, b)
    return verified_equal(str(prediction), str(gold))
