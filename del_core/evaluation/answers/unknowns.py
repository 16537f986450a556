"""The values of a several-unknown answer (SimulEq) in the order the question asks for them.

An answer like "There are 9 poets and 15 novelists." names its values instead of following the
question's order ("How many novelists are there? How many poets are there?"). :func:`in_asked_order`
reads each value's label (the words after it, or, when none, before it if it follows "is", "=") and
sorts the values by where a word of the label that no other label has first appears in the
question's asking sentences (those ending in "?" or starting with Find / What / How / Determine /
Calculate / Solve); values whose label names nothing asked follow, in their written order. A
value followed by "%" is a label ("$2,200 at 6%"), not a value, when other values are present.
Words are compared in lower case, without a plural "s", number words as digits ("five" = "5"),
"7 %" as "7%", hyphens as spaces, and words of six or more letters one typo apart as equal.
"""

from __future__ import annotations

import re
from typing import Optional

from del_core.evaluation.answers.numbers import NUMBER_PATTERN, thousands_with_commas

_ASKING = re.compile(r"^\s*(?:find|what|how|determine|calculate|solve|compute)\b", re.I)
_STOPWORDS = frozenset(
    re.findall(r"\w+", "a an the and of at is are was were there be to in on for with each many much how what did")
)
_BEFORE_VALUE = re.compile(r"(?:\bis|\bare|\bwas|\bwere|=|:)\s*\$?\s*$", re.I)


_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        re.findall(r"\w+", "zero one two three four five six seven eight nine ten eleven twelve")
    )
} | {"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "hundred": "100"}


def _words(text: str) -> list[str]:
    """Lower-case words and numbers of ``text``, singular, number words as digits."""
    text = re.sub(r"(\d)\s+%", r"\1%", text.lower().replace("-", " "))
    words = [re.sub(r"(?<=[a-z]{3})e?s$", "", word) for word in re.findall(r"[a-z]+|\d+(?:\.\d+)?%?", text)]
    return [_NUMBER_WORDS.get(word, word) for word in words]


def _same_word(a: str, b: str) -> bool:
    """Equal, or one edit apart for words of 6+ letters ("Colombian" / "Columbian")."""
    if a == b:
        return True
    if min(len(a), len(b)) < 6 or abs(len(a) - len(b)) > 1 or not (a.isalpha() and b.isalpha()):
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def asked_text(question: str) -> str:
    """The sentences of ``question`` that ask for something."""
    sentences = re.split(r"(?<=[.?!])\s+", question.strip())
    asking = [s for s in sentences if s.rstrip().endswith("?") or _ASKING.match(s)]
    return " ".join(asking) or question


def _values_and_labels(statement: str) -> list[tuple[str, list[str]]]:
    """(value as written, label words) for each value of ``statement``."""
    matches = list(NUMBER_PATTERN.finditer(statement))
    percents = {i for i, m in enumerate(matches) if statement[m.end() :].lstrip().startswith("%")}
    if len(matches) - len(percents) >= 2:
        matches = [m for i, m in enumerate(matches) if i not in percents]
    values = []
    for i, match in enumerate(matches):
        before = statement[matches[i - 1].end() if i else 0 : match.start()]
        after = statement[match.end() : matches[i + 1].start() if i + 1 < len(matches) else len(statement)]
        words = _content_words(re.split(r"\band\b|[,;.]\s", after)[0])
        if not words and _BEFORE_VALUE.search(before):  # "the smaller number is 19"
            words = _content_words(before)
        values.append((match.group(0), words))
    return values


def _content_words(text: str) -> list[str]:
    return [word for word in _words(text) if word not in _STOPWORDS]


def _position(words: list[str], asked: list[str]) -> Optional[int]:
    """Where the first of ``words`` that the asking text has appears in it first."""
    for word in words:
        for position, other in enumerate(asked):
            if _same_word(word, other):
                return position
    return None


def in_asked_order(statement: str, question: str) -> Optional[list[str]]:
    """The values of ``statement`` ordered by the question's unknowns (module docstring), or None
    when it has no value."""
    values = _values_and_labels(thousands_with_commas(statement.replace("\u2212", "-")))
    if not values:
        return None
    asked = _words(asked_text(question))
    positions = []
    for i, (_, words) in enumerate(values):
        others = {w for j, (_, other) in enumerate(values) if j != i for w in other}
        positions.append(_position([w for w in words if w not in others], asked))
    placed = sorted((p, i) for i, p in enumerate(positions) if p is not None)
    order = [i for _, i in placed] + [i for i, p in enumerate(positions) if p is None]
    return [values[i][0] for i in order]
