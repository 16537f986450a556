"""Hedges and give-ups: the outputs that commit to no single answer, which the readers
(:func:`.extract.answer_from_text`) answer with None.

Hedges, on every kind (docs/grading.md): an output boxing two different answers is no answer
(numbers: boxes are the unknowns, so only boxes joined by "or" / "maybe"); so is a segment that
joins two different letters by "or", "and", "and/or", "/", "or maybe" ("A or C", "(A) or (C)"), or
two different values by "or", "either", "possibly", "maybe", "perhaps" or after "between"
("18 (or possibly 19)", "between 18 and 19"). An option's own words are no hedge or elimination.
Without an answer segment (:mod:`.segments`), the final line that commits to two values is no
answer ("It could be 19, or it could be 18."); a last line that gives up ("cannot", "not enough
information") is no answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from del_core.evaluation.answers.math_equivalence import inequality_as_interval
from del_core.evaluation.answers.numbers import NUMBER_PATTERN, find_numbers, parse_number
from del_core.evaluation.answers.segments import SENTENCE_END, boxed_spans, clean_segment
from del_core.evaluation.question import LETTERS

_GIVES_UP = re.compile(
    r"\b(?:cannot|can't|unable to|not sure|don't know|do not know|no way to|not enough|insufficient|impossible)\b", re.I
)


def gives_up(text: str) -> bool:
    """Whether the output ends by saying it has no answer: a last line with no number that says it
    cannot finish ("I cannot finish this computation.")."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return bool(lines) and not find_numbers(lines[-1]) and bool(_GIVES_UP.search(lines[-1]))


# what joins two letters of a hedge: "A or C", "(A) and/or (C)", "A / C", "A or maybe option C"
_LETTER_JOIN = re.compile(
    r"[\s,)*]*(?:or|and|and/or|/|or\s+(?:maybe|perhaps|possibly))[\s(*]*(?:(?:option|choice)\s*\(?)?", re.I
)
_OR = re.compile(r"\bor\b|\beither\b|\band/or\b|\bbetween\b|\bpossibly\b|\bmaybe\b|\bperhaps\b", re.I)
_BOX_OR = re.compile(r"\bor\b|\bmaybe\b|\bperhaps\b|\bthough\b", re.I)


def boxes_hedge(text: str, kind: str) -> bool:
    """Whether the output boxes two or more different answers: any two boxes that differ, for every
    kind but ``numbers`` (whose boxes are the unknowns: there, two boxes joined by "or")."""
    spans = boxed_spans(text)
    if len(spans) < 2:
        return False
    if kind == "numbers":
        return any(_BOX_OR.search(text[a[1] : b[0]]) for a, b in zip(spans, spans[1:]))
    contents = {re.sub(r"[\s$]|\\text\{|\}$", "", content) for _, _, content in spans}
    return len(contents) > 1


def values_hedged(statement: str) -> bool:
    """Whether a statement commits to two different values: two numbers with "or", "either",
    "possibly", "maybe" or "perhaps" between them ("18 or 20", "18 (or possibly 19)"), right after
    "between" ("between 18 and 19"; not "the difference between 79 and 28"), or as an ascending
    range ("18-20")."""
    text = re.sub(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", r"\1/\2", statement.replace("\u2212", "-"))
    found = list(NUMBER_PATTERN.finditer(text))
    values = [parse_number(m.group(0)) for m in found]
    for i in range(len(found) - 1):
        if values[i] == values[i + 1] or _same_in_percent(text, found[i], found[i + 1]):
            continue
        between = text[found[i].end() : found[i + 1].start()]
        if _HEDGE_WORDS.search(between):
            return True
        ascending = values[i] is not None and values[i + 1] is not None and values[i] < values[i + 1]
        if _RANGE_DASH.fullmatch(between) and ascending:  # "18-20": a range; "20-2" is a subtraction
            return True
        if _BETWEEN.search(text[: found[i].start()]) and not _OPERATION_BETWEEN.search(text[: found[i].start()]):
            return True
    return False


_HEDGE_WORDS = re.compile(r"\bor\b|\beither\b|\bpossibly\b|\bmaybe\b|\bperhaps\b", re.I)
_BETWEEN = re.compile(r"\bbetween\s*\$?\s*$", re.I)  # "between 18 and 19": the first value right after it
# "the difference between 79 and 28" names the operands of an operation, not two answers
_OPERATION_BETWEEN = re.compile(
    r"\b(?:difference|distance|ratio|sum|product|gap|average|mean)\s+between\s*\$?\s*$", re.I
)
_RANGE_DASH = re.compile(r"-|\s*[\u2013\u2014]\s*")
# what joins two $..$ values of a hedge: "$3$, or it could be $2$", "$a$ to $b$", "$a$ - $b$"
_SPAN_JOIN = re.compile(r".*\b(?:or|either|maybe|perhaps|possibly)\b.*|\s*(?:to|-|\u2013|\u2014)\s*", re.I | re.S)


def _spans_hedged(statement: str) -> bool:
    """Whether two different ``$..$`` values of a statement are joined as alternatives or a range."""
    spans = list(re.finditer(r"\$([^$]+)\$", statement))
    return any(
        re.sub(r"\s", "", a.group(1)) != re.sub(r"\s", "", b.group(1))
        and _SPAN_JOIN.fullmatch(statement[a.end() : b.start()])
        for a, b in zip(spans, spans[1:])
    )


def _plain_range(segment: str) -> bool:
    """Whether a segment is only a range of two numbers, "18-20" or "$-2$–$0$"."""
    match = re.fullmatch(
        r"[\s$]*(-?\d+(?:\.\d+)?)\$?\s*(?:-|\u2013|\u2014|\bto\b)\s*\$?(-?\d+(?:\.\d+)?)[\s$.]*", segment
    )
    return bool(match) and parse_number(match.group(1)) < parse_number(match.group(2))


def final_statement_hedges(text: str, kind: str) -> bool:
    """Without an answer segment: whether the final line commits to two values ("It could be 19,
    or it could be 18.", "$3$ or $2$"); multiple choice reads its last line on its own."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines or kind == "choice":
        return False
    if kind == "math":
        start = len(lines) - 1
        while start > 0 and "\n".join(lines[start:]).count("$") % 2:  # a $..$ broken over lines
            start -= 1
        return _spans_hedged("\n".join(lines[start:]))
    sentences = [sentence for sentence in SENTENCE_END.split(lines[-1]) if find_numbers(sentence)]
    return bool(sentences) and values_hedged(sentences[-1])


def _same_in_percent(text: str, a: re.Match, b: re.Match) -> bool:
    """Whether two numbers are one value, once as a percentage ("50%, or 0.5")."""
    p, q = parse_number(a.group(0)), parse_number(b.group(0))
    if p is None or q is None:
        return False
    a_percent = text[a.end() :].lstrip().startswith(("%", "\\%", "percent"))
    b_percent = text[b.end() :].lstrip().startswith(("%", "\\%", "percent"))
    return (a_percent and p == 100 * q) or (b_percent and q == 100 * p)


_RULED_OUT = re.compile(r"\)?\s*(?:is|are)\s+(?:not\b|wrong|incorrect|ruled out|eliminated)|\)?\s*(?:is|are)n't", re.I)


def solution_set(segment: str) -> Optional[str]:
    """The values of "x = 2 or x = 3" (one variable, every part an equation) as the list "2, 3",
    or None: a solution set written as alternatives, not a hedge."""
    text = re.sub(r"\\text\{\s*(or|and)\s*\}", r" \1 ", segment.replace("$", "")).strip().rstrip(".")
    parts = re.split(r"\s*(?:,\s*)?\b(?:or|and)\b\s*|\s*,\s*", text)
    found = [re.fullmatch(r"\s*([a-zA-Z])\s*=\s*([^=]+?)\s*", part) for part in parts]
    if len(found) < 2 or not all(found) or len({m.group(1) for m in found}) > 1:
        return None
    return ", ".join(m.group(2) for m in found)


def segment_hedges(segment: str, kind: str, choices: Sequence[str] = ()) -> bool:
    """Whether an answer segment commits to two or more different options or values ("A or C",
    "(A) or maybe (C)", "either 18 or 20", "18 and/or 20"); echoing options or eliminating them
    ("B, not D") is not a commitment."""
    first = SENTENCE_END.split(segment)[0] if kind != "math" else segment
    if kind == "choice":
        letters = LETTERS[: len(choices)] if choices else LETTERS
        for choice in sorted(choices, key=len, reverse=True):  # an option's own "A and B" is no hedge
            first = first.replace(choice, " ") if len(choice) > 3 else first
        found = list(re.finditer(rf"(?<![A-Za-z])\(?([{letters}])\)?(?![A-Za-z])", first))
        return any(
            a.group(1) != b.group(1)
            and _LETTER_JOIN.fullmatch(first[a.end() : b.start()])
            and not _RULED_OUT.match(first[b.end() :])  # "C, and D is wrong": an elimination
            for a, b in zip(found, found[1:])
        )
    if kind == "math":  # "x < -8 or x > 8" is one answer (a union); so is "x = 2 or x = 3" (a set)
        if inequality_as_interval(clean_segment(first)) is not None or solution_set(first) is not None:
            return False
        return (
            _spans_hedged(first)
            or _plain_range(first)
            or bool(_OR.search(re.sub(r"\\text\{\s*(?!or\b)[^{}]*\}", " ", first)))
        )
    return bool(values_hedged(first))
