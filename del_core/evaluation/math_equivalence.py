"""Equivalence of two MATH answers written in LaTeX.

:func:`math_equivalent` tries, in order: equal after normalisation (:func:`normalize`: ``\\left``/
``\\right``, ``\\dfrac``/``\\tfrac``, ``\\text{}``, degrees, dollars, spacing, ``\\frac12``,
``\\sqrt2``, "x = 5", a trailing "."); equal as numbers (``numbers.numbers_match``); element-wise
for tuples, intervals and comma lists (a bare comma list in any order); equal as sympy expressions
(``simplify(a - b) == 0``, or, when the difference is a number that is not an exact rational,
numerically within 1e-6 relative), each sympy comparison under a
wall-clock limit (``SYMPY_SECONDS``; ITIMER_REAL, so only in the main thread: elsewhere it runs
unlimited). LaTeX is turned into sympy text by :func:`latex_to_sympy_text` and accepted only when
it is made of digits, operators, single letters and a few function names, so nothing else reaches
sympy's ``eval``.
"""

from __future__ import annotations

import re
import signal
import threading
from contextlib import contextmanager
from typing import Optional

from del_core.evaluation.numbers import numbers_match, parse_number

SYMPY_SECONDS = 3.0
_FUNCTIONS = {"sqrt", "pi", "oo", "log", "sin", "cos", "tan", "exp", "I"}


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
    counts as a group (``\\frac12``)."""
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text):
        return None, start
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


def normalize(answer: str) -> str:
    """A canonical text of a LaTeX answer (see the module docstring)."""
    s = str(answer).strip().replace("\n", "")
    s = s.replace("\\!", "").replace("\\\\", "\\").replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°", "", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\\(?:,|;|:| )|~", "", s)
    s = re.sub(r"\\text\{\s*(?:[a-zA-Z]+\s*)+(?:\^\d)?\}\s*$", "", s) if re.search(r"[\d}]\s*\\text\{", s) else s
    for command in ("\\text", "\\textbf", "\\mbox", "\\mathrm", "\\mathbf", "\\operatorname"):
        s = _rewrite_command(s, command, 1, lambda a: a)
    s = s.replace("\\{", "{").replace("\\}", "}") if s.startswith("\\{") else s
    s = _rewrite_command(s, "\\sqrt", 1, lambda a: "\\sqrt{" + a + "}")
    s = _rewrite_command(s, "\\frac", 2, lambda a, b: "\\frac{" + a + "}{" + b + "}")
    s = s.replace(" ", "")
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    match = re.fullmatch(r"-?(\d+)/(\d+)", s)
    if match:
        s = ("-" if s.startswith("-") else "") + "\\frac{" + match.group(1) + "}{" + match.group(2) + "}"
    parts = s.split("=")
    if len(parts) == 2 and re.fullmatch(r"[a-zA-Z](_\d|_\{\d\})?|\\[a-z]+", parts[0]):
        s = parts[1]
    return s.rstrip(".")


def latex_to_sympy_text(s: str) -> Optional[str]:
    """Normalised LaTeX -> text for sympy's parser, or None when outside the supported subset."""
    s = _rewrite_command(s, "\\frac", 2, lambda a, b: f"(({a})/({b}))")
    s = re.sub(r"\\sqrt\[([^\]]+)\]\{", r"\\root{\1}{", s)
    s = _rewrite_command(s, "\\root", 2, lambda n, a: f"(({a})**(1/({n})))")
    s = _rewrite_command(s, "\\sqrt", 1, lambda a: f"sqrt({a})")
    replacements = {
        "\\pi": " pi ",
        "\\infty": " oo ",
        "\\cdot": "*",
        "\\times": "*",
        "\\div": "/",
        "\\ln": " log",
        "\\log": " log",
        "\\sin": " sin",
        "\\cos": " cos",
        "\\tan": " tan",
        "\\exp": " exp",
        "^": "**",
        "{": "(",
        "}": ")",
    }
    for latex, text in replacements.items():
        s = s.replace(latex, text)
    s = re.sub(r"(?<![a-zA-Z])i(?![a-zA-Z])", " I ", s)
    if "\\" in s or "__" in s or not re.fullmatch(r"[0-9a-zA-Z+\-*/().\s]*", s) or not s.strip():
        return None
    names = set(re.findall(r"[a-zA-Z]+", s))
    if any(len(name) > 1 and name not in _FUNCTIONS for name in names):
        return None
    return s


def _sympy_expression(text: str):
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    names = {letter: sympy.Symbol(letter) for letter in "abcdefghjklmnopqrstuvwxyzABCDEFGHJKLMNOPQRSTUVWXYZ"}
    names.update(
        sqrt=sympy.sqrt,
        pi=sympy.pi,
        oo=sympy.oo,
        log=sympy.log,
        sin=sympy.sin,
        cos=sympy.cos,
        tan=sympy.tan,
        exp=sympy.exp,
        I=sympy.I,
        Integer=sympy.Integer,
        Float=sympy.Float,
        Rational=sympy.Rational,
        Symbol=sympy.Symbol,
    )
    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    return parse_expr(
        text, local_dict=names, global_dict={"__builtins__": {}, **names}, transformations=transformations
    )


def sympy_equal(a: str, b: str, seconds: float = SYMPY_SECONDS) -> bool:
    """Both normalised LaTeX answers parse and are equal as sympy expressions (within ``seconds``)."""
    text_a, text_b = latex_to_sympy_text(a), latex_to_sympy_text(b)
    if text_a is None or text_b is None:
        return False
    try:
        import sympy

        with time_limit(seconds):
            x, y = _sympy_expression(text_a), _sympy_expression(text_b)
            difference = sympy.simplify(x - y)
            if difference == 0:
                return True
            if not difference.free_symbols and not difference.is_Rational:  # exact numbers: 0 or not
                value, scale = complex(sympy.N(difference)), complex(sympy.N(y))
                return abs(value) <= 1e-6 * max(1.0, abs(scale))
            return False
    except (_TimeUp, Exception):  # sympy raises many kinds on odd input: not equal
        return False


def _split_top_level(s: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _elementwise(a: str, b: str) -> Optional[bool]:
    """True/False for two tuples/intervals/comma lists of the same shape; None if not lists."""
    brackets = "([{"
    if a[:1] in brackets and b[:1] in brackets and a[-1:] in ")]}" and b[-1:] in ")]}":
        if (a[0], a[-1]) != (b[0], b[-1]):
            return False if len(_split_top_level(a[1:-1])) > 1 else None
        xs, ys = _split_top_level(a[1:-1]), _split_top_level(b[1:-1])
        if len(xs) < 2 or len(xs) != len(ys):
            return None if len(xs) == len(ys) == 1 else False
        return all(math_equivalent(x, y) for x, y in zip(xs, ys))
    xs, ys = _split_top_level(a), _split_top_level(b)
    if len(xs) < 2 and len(ys) < 2:
        return None
    if len(xs) != len(ys):
        return False
    remaining = list(ys)
    for x in xs:  # a bare comma list ("all solutions") in any order
        match = next((i for i, y in enumerate(remaining) if math_equivalent(x, y)), None)
        if match is None:
            return False
        remaining.pop(match)
    return True


def math_equivalent(prediction: Optional[str], gold: str) -> bool:
    """Whether ``prediction`` answers a MATH question whose gold answer is ``gold``."""
    if prediction is None or not str(prediction).strip():
        return False
    a, b = normalize(prediction), normalize(gold)
    if a == b:
        return True
    if parse_number(a) is not None and parse_number(b) is not None:
        return numbers_match(a, b)
    listed = _elementwise(a, b)
    if listed is not None:
        return listed
    return sympy_equal(a, b)
