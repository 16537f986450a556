"""Answers out of model outputs: the program of a program-of-thought output, the answer printed by a
program, and the answer written in a chain-of-thought text. None means "no answer" (for multiple
choice: unanswered; there is no default letter).

Text answers: the last ``\\boxed{..}``, else what follows the last "answer is" (or "Answer:"), is the
answer segment. number: the segment's first number, else the text's last number. numbers: every
number of the segment, else the text's last number. math: the segment, else the whole output when
it is one line, else the text's last number (a segment whose braces are open runs on to the line
where they close). choice: a letter at the start of the segment or an
option text it equals, else a bare letter output ("B", "(B)"), else the last "(X)" of the text.
Program output: the last non-empty line (number: its last number; math: the line, with the lines
before it when its braces close an earlier line's; choice: read as text);
numbers: the numbers of the last line that has any, or every line's number when each printed line
holds exactly one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Optional, Union

from del_core.evaluation.benchmarks import LETTERS, last_boxed
from del_core.evaluation.numbers import find_numbers, numbers_match

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)
_ANSWER_IS = re.compile(r"(?:answer\s+is|answer\s*:)\s*:?\s*", re.I)

Answer = Union[str, list, None]


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
        while start > 0 and _brace_depth("\n".join(lines[start:])) < 0:  # printed over several lines
            start -= 1
        return "\n".join(lines[start:])
    return answer_from_text(last, kind, choices)


def answer_segment(text: str) -> Optional[str]:
    """The last ``\\boxed{..}`` content, else the text after the last "answer is", else None."""
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    matches = list(_ANSWER_IS.finditer(text))
    if not matches:
        return None
    lines = text[matches[-1].end() :].strip().split("\n")
    segment = lines[0]
    for line in lines[1:]:  # a LaTeX answer broken over lines: up to where its braces balance
        if _brace_depth(segment) <= 0:
            break
        segment += "\n" + line
    return segment.strip() or None


def _brace_depth(text: str) -> int:
    return text.count("{") - text.count("}")


def _clean_segment(segment: str) -> str:
    """Without surrounding "$", spaces and a final "."."""
    previous = None
    while previous != segment:
        previous, segment = segment, segment.strip().strip("$").rstrip(".")
    return segment


def answer_from_text(text: str, kind: str, choices: Sequence[str] = ()) -> Answer:
    """The answer a chain-of-thought text gives (see the module docstring)."""
    segment = answer_segment(text)
    if kind == "choice":
        return _choice(text, segment, choices)
    if kind == "math":
        if segment is not None:
            return _clean_segment(segment) or None
        lines = [line for line in text.strip().splitlines() if line.strip()]
        if len(lines) == 1:
            return _clean_segment(lines[0]) or None
        found = find_numbers(text)
        return found[-1] if found else None
    if segment is not None:
        found = find_numbers(segment)
        if found:
            return found if kind == "numbers" else found[0]
    found = find_numbers(text)
    if not found:
        return None
    return [found[-1]] if kind == "numbers" else found[-1]


def _choice(text: str, segment: Optional[str], choices: Sequence[str]) -> Optional[str]:
    letters = LETTERS[: len(choices)] if choices else LETTERS
    letter = rf"([{letters}])"
    if segment is not None:
        match = re.match(rf"[\s:*]*(?:\\text\{{)?(?:option\s+|choice\s+)?\(?{letter}(?![a-zA-Z])", segment, re.I | re.S)
        if match and (match.group(1).isupper() or "(" in segment[: match.end()]):
            return match.group(1).upper()
        by_text = _choice_by_text(_clean_segment(segment), choices)
        if by_text is not None:
            return by_text
    bare = re.fullmatch(rf"\s*\(?{letter}\)?[.:]?\s*", text)
    if bare:
        return bare.group(1)
    found = re.findall(rf"\({letter}\)", text)
    return found[-1] if found else None


def _choice_by_text(answer: str, choices: Sequence[str]) -> Optional[str]:
    """The letter of the one option whose text equals ``answer`` (as text or as a number)."""
    hits = [i for i, c in enumerate(choices) if c.strip().strip("$").strip().lower() == answer.lower()]
    if not hits:
        hits = [i for i, c in enumerate(choices) if numbers_match(answer, c.strip().strip("$"))]
    return LETTERS[hits[0]] if len(hits) == 1 else None
