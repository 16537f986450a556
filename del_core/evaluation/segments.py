"""The answer segment of a chain-of-thought output: where it writes its answer, and the text
helpers the readers of a segment share (:mod:`.extract`, :mod:`.hedges`, :mod:`.program_output`).

The answer segment is the last ``\\boxed{..}``, else what follows the last "answer is", "answer:" or
"####" (markdown bold around it ignored); a segment whose braces are open runs on to the line where
they close.
"""

from __future__ import annotations

import re
from typing import Optional

from del_core.evaluation.benchmarks import last_boxed

_ANSWER_IS = re.compile(r"(?:answer\s+is|answer\s*:|####)[\s*:]*", re.I)
SENTENCE_END = re.compile(r"(?<!\d)\.(?!\d)|\n")  # a point that is not a decimal point, or a line end


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
