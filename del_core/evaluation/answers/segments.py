"""The answer segment of a chain-of-thought output: where it writes its answer, and the text
helpers the readers of a segment share (:mod:`.extract`, :mod:`.hedges`, :mod:`.program_output`;
:func:`last_boxed` also reads MATH's gold from its solution).

The answer segment is the last ``\\boxed{..}``, else what follows the last "answer is", "answer:" or
"####" (markdown bold around it ignored); a segment whose braces are open runs on to the line where
they close.
"""

from __future__ import annotations

import re
from typing import Optional

_ANSWER_IS = re.compile(r"(?:answer\s+is|answer\s*:|####)[\s*:]*", re.I)
SENTENCE_END = re.compile(r"(?<!\d)\.(?!\d)|\n")  # a point that is not a decimal point, or a line end


def _boxed_at(text: str, start: int) -> Optional[tuple[str, int]]:
    """(content, end index) of the ``\\boxed{..}`` / ``\\fbox{..}`` starting at ``start`` (braces
    balanced; ``\\boxed 5`` too), or None."""
    rest = text[start:]
    brace = rest.find("{")
    if brace < 0 or rest[len("\\fbox") if rest.startswith("\\fbox") else len("\\boxed") : brace].strip():
        match = re.match(r"\\(?:boxed|fbox)\s+([^\s$]+)", rest)  # "\boxed 5"
        return (match.group(1), start + match.end()) if match else None
    depth = 0
    for i in range(brace, len(rest)):
        if rest[i] == "{":
            depth += 1
        elif rest[i] == "}":
            depth -= 1
            if depth == 0:
                return rest[brace + 1 : i], start + i + 1
    return None


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every ``\\boxed{..}`` / ``\\fbox{..}`` of ``text``, in order."""
    spans = []
    for match in re.finditer(r"\\(?:boxed|fbox)(?![a-zA-Z])", text):
        found = _boxed_at(text, match.start())
        if found is not None:
            spans.append((match.start(), found[1], found[0]))
    return spans


def last_boxed(text: str) -> Optional[str]:
    """The content of the last ``\\boxed{..}`` / ``\\fbox{..}`` (braces balanced), or None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    found = None if start < 0 else _boxed_at(text, start)
    return found[0] if found else None


def answer_segment(text: str) -> Optional[str]:
    """The last ``\\boxed{..}`` content, else the text after the last "answer is", "answer:" or
    "####" (on to the line where its braces close), else None."""
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    return _phrase_segment(text)


def _phrase_segment(text: str) -> Optional[str]:
    """The text after the last "answer is", "answer:" or "####" (module docstring), or None."""
    matches = list(_ANSWER_IS.finditer(text))
    if not matches:
        return None
    lines = text[matches[-1].end() :].strip().split("\n")
    segment = lines[0]
    for line in lines[1:]:  # a LaTeX answer broken over lines: up to where its braces balance
        if brace_depth(segment) <= 0:
            break
        segment += "\n" + line
    return segment.strip() or None


def brace_depth(text: str) -> int:
    """The number of "{" less the number of "}": positive while braces are open."""
    return text.count("{") - text.count("}")


def clean_segment(segment: str) -> str:
    """Without surrounding "$", "*", spaces and a final "."."""
    previous = None
    while previous != segment:
        previous, segment = segment, segment.strip().strip("$*").rstrip(".")
    return segment
