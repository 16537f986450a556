"""Program-of-thought outputs: the program to run (:func:`program_from_output`, for
:mod:`.sandbox`) and the answer it printed (:func:`answer_from_program_output`). None means "no
answer" (for multiple choice: unanswered; there is no default letter).

Program output: the last non-empty line that is not a label of words ("Done.", "That is the
answer."): number: its last number; math: the line, with the lines before it when its braces close
an earlier line's, without a printed label ("answer: ", "x = ") and sympy's printing read as LaTeX
(:func:`sympy_as_latex`: "9*pi", "Interval.Lopen(2, 5)"); choice: read as text
(:func:`.extract.answer_from_text`); numbers: the numbers of the last line that has any, or every
line's number when each printed line holds exactly one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Optional

from del_core.evaluation.answers.extract import Answer, answer_from_text
from del_core.evaluation.answers.numbers import find_numbers
from del_core.evaluation.answers.segments import brace_depth

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)


def program_from_output(text: str) -> Optional[str]:
    """The Python program of a program-of-thought output (a fenced block, else the text), cut to its
    longest prefix that compiles; a final bare expression or assignment is printed when the
    program prints nothing. None when no line compiles."""
    fenced = _FENCE.search(text)
    code = (fenced.group(1) if fenced else text).strip("\n")
    lines = code.split("\n")
    while lines:
        candidate = "\n".join(lines)
        try:
            tree = ast.parse(candidate)
        except (SyntaxError, ValueError):
            lines.pop()
            continue
        if not tree.body:
            return None
        return candidate + _print_result(tree)
    return None


def _print_result(tree: ast.Module) -> str:
    has_print = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print" for n in ast.walk(tree)
    )
    if has_print:
        return ""
    last = tree.body[-1]
    if isinstance(last, ast.Expr):
        return f"\nprint({ast.unparse(last.value)})"
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return f"\nprint({last.targets[0].id})"
    if isinstance(last, ast.FunctionDef) and not last.args.args:
        return f"\nprint({last.name}())"
    return ""


def answer_from_program_output(stdout: str, kind: str, choices: Sequence[str] = ()) -> Answer:
    """The answer a program printed (see the module docstring)."""
    lines = [line.strip() for line in stdout.strip().splitlines() if line.strip()]
    while len(lines) > 1 and _LABEL_LINE.fullmatch(lines[-1]):  # "Done.", "That is the answer."
        lines.pop()
    lines = [_PRINTED_LIST.sub(_list_elements, line) for line in lines]
    if not lines:
        return None
    if kind == "numbers":
        per_line = [find_numbers(line) for line in lines]
        if all(len(found) == 1 for found in per_line):
            return [found[0] for found in per_line]
        return next((found for found in reversed(per_line) if found), None)
    last = lines[-1]
    if kind == "number":
        found = find_numbers(last) or find_numbers(stdout)
        return found[-1] if found else None
    if kind == "math":
        start = len(lines) - 1
        while start > 0 and brace_depth("\n".join(lines[start:])) < 0:  # printed over several lines
            start -= 1
        return sympy_as_latex(_PRINTED_LABEL.sub("", "\n".join(lines[start:])))
    return answer_from_text(last, kind, choices)


# a printed line that is a label, not a value: words only, a sentence (two words, or a final ".!:")
_LABEL_LINE = re.compile(r"[A-Za-z][A-Za-z' ,-]*[A-Za-z] [A-Za-z][A-Za-z' ,-]*[.!:]?|[A-Za-z]{2}[A-Za-z' ,-]*[.!:]")
# a printed one-element list or tuple: "['C']", "[18]", "[Eq(x, 3)]", "(18,)" -> its element
# (a top-level comma is kept: "[-3,2]" may be an interval)
_PRINTED_LIST = re.compile(r"^\[(.*)\]$|^\((.*),\)$")


def _list_elements(match: re.Match) -> str:
    element = match.group(1) if match.group(1) is not None else match.group(2)
    depth = 0
    for char in element:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(char, 0)
        if depth < 0 or (char == "," and depth == 0):
            return match.group(0)
    return element.strip().strip("'\"") if depth == 0 else match.group(0)


_PRINTED_LABEL = re.compile(r"^(?:[A-Za-z][A-Za-z ]*:|[A-Za-z_]\w*\s*=(?!=))\s*")  # "answer: ", "total = "
_SYMPY_MARKS = re.compile(r"\*|\bEq\(|\bUnion\(|\bpi\b|\bsqrt\(|\boo\b|\bInterval\b|\bI\b|\bE\b")


def sympy_as_latex(text: str) -> str:
    """A value as sympy prints it, in LaTeX ("9*pi" -> ``9\\cdot\\pi``, "sqrt(2)/2" ->
    ``\\sqrt{2}/2``, "Interval.Lopen(2, 5)" -> "(2, 5]", "oo" -> ``\\infty``); other text unchanged."""
    if "\\" in text or not _SYMPY_MARKS.search(text):
        return text
    ends = {"Interval.Lopen": "(]", "Interval.Ropen": "[)", "Interval.open": "()", "Interval": "[]"}
    for name, (left, right) in ends.items():
        text = re.sub(rf"{re.escape(name)}\(([^()]*)\)", lambda m, a=left, b=right: a + m.group(1) + b, text)
    text = re.sub(r"^Eq\((.*), ([^,]*)\)$", r"\1 = \2", text)
    text = _rewrite_unions(text)
    text = _rewrite_calls(text, "sqrt", "\\sqrt")
    text = re.sub(r"\*\*\(([^()]*)\)", r"^{\1}", text).replace("**", "^")
    text = re.sub(r"\boo\b", r"\\infty", re.sub(r"\bpi\b", r"\\pi", text))
    text = re.sub(r"\bI\b", "i", text)
    text = re.sub(r"(?<=[\d}])\s*\*\s*(?=i\b)", "", text)  # "5*I" -> "5i": math-verify's imaginary unit
    text = re.sub(r"(?<=\bi)\s*\*\s*", "", text).replace("*", r" \cdot ")
    return text


def _rewrite_unions(text: str) -> str:
    """``Union(a, b, ..)`` (nested too) -> ``a \\cup b \\cup ..``."""
    while (start := text.rfind("Union(")) >= 0:
        depth, parts, begin = 0, [], start + len("Union(")
        for j in range(begin - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 1 and text[j] == "," and j > begin - 1:
                parts.append(text[begin:j].strip())
                begin = j + 1
            if depth == 0:
                break
        else:
            return text
        parts.append(text[begin:j].strip())
        text = text[:start] + " \\cup ".join(parts) + text[j + 1 :]
    return text


def _rewrite_calls(text: str, name: str, command: str) -> str:
    """``name(..)`` (parentheses balanced) -> ``command{..}``."""
    out, i = [], 0
    while (start := text.find(name + "(", i)) >= 0:
        depth, j = 0, start + len(name)
        for j in range(start + len(name), len(text)):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
        if depth:
            break
        out += [text[i:start], command, "{", _rewrite_calls(text[start + len(name) + 1 : j], name, command), "}"]
        i = j + 1
    return "".join(out) + text[i:]
