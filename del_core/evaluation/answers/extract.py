"""The answer written in a chain-of-thought text (:func:`answer_from_text`). None means "no answer"
(for multiple choice: unanswered; there is no default letter). The answer is read from the answer
segment (:mod:`.segments`: the last ``\\boxed{..}``, else what follows the last "answer is",
"answer:" or "####"); an output or segment that hedges is no answer (:mod:`.hedges`). What a
program printed is read by :mod:`.program_output`.

  * number: a leading arithmetic chain is skipped to its result ("9 * 2 = 18" -> 18); "- 10" is
    -10; then the segment's first number (plain-space thousands "118 000" read as one number;
    "eighteen" when it has no digits; an amount in cents / dollars converted to the currency unit
    the question asks for). Without a segment: the text's last number outside parenthesised
    working ("$18 every day (she sells 9 eggs at $2 each)" -> 18); a last line that gives up
    ("cannot", "not enough information") is no answer.
  * numbers (SimulEq, the unknowns in the question's order): the sentence with two or more boxes
    (one number each), else the segment, else the last sentence that has numbers: when that
    sentence assigns ("x = 4, y = 6"), the last run of assignments (each unknown's last value, in
    the order stated); otherwise its numbers, ordered by the names the question asks for
    (:mod:`del_core.evaluation.answers.unknowns`: "9 poets and 15 novelists" answers "How many novelists
    ..? How many poets ..?" with 15, 9). A hedge ("30 or 32") is no answer.
  * math: the segment up to the end of its sentence (its first ``$..$`` when it starts with one or
    with words, "The result comes to $x$."; an escaped ``\\$`` is a currency sign),
    else the whole output when it is one line, else the last ``$..$`` of the last line, else the
    text's last number.
  * choice, from the segment: an option's exact text ("A charge per mile" is that option, not A), a
    letter at its start ("(B)", "B", "b.", "Option B", "B) 12", ``$\\textbf{(B)}$``; a lowercase
    letter only when nothing but punctuation follows, so "a number" is not A), an "option (B)" /
    "choice B" in it, an option text it equals (case, spaces, "$" and dash kinds aside), or its
    number when that is the one number of exactly one option ("12.5 hours" for "12.5", "144 km" for
    "144km"); "the correct option is B" in it. Without a segment: "Option B is correct", "B is (the)
    correct (answer)", "the correct option is (B)" anywhere (the last one); else an output or last
    line that is only a letter ("(B)", "**B**"); else the last line as a final statement: starting
    with a letter ("A) 438", "D: ..", "Option B"), naming exactly one "(C)", containing the text of
    exactly one option ("Its maximum occurs at (3, a)."), or ending in the one number of exactly one
    option ("They leave together after 272 minutes."). A last line naming several letters (an echoed
    option list), hedging or eliminating ("not", "wrong", "maybe") is no answer; so is a segment
    that does not parse.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Optional, Union

from del_core.evaluation.answers.hedges import (
    boxes_hedge,
    final_statement_hedges,
    gives_up,
    segment_hedges,
    solution_set,
    values_hedged,
)
from del_core.evaluation.answers.numbers import (
    NUMBER_PATTERN,
    decimal_text,
    find_numbers,
    number_from_words,
    numbers_match,
    parse_number,
    spaced_thousands,
)
from del_core.evaluation.answers.segments import SENTENCE_END, answer_segment, boxed_spans, clean_segment
from del_core.evaluation.answers.unknowns import in_asked_order
from del_core.evaluation.question import LETTERS

_ARITHMETIC_CHAIN = re.compile(r"^[\s$]*[-+]?[\d.,]+(?:\s*[-+*/×x÷^]\s*\(?[\d.,]+\)?)+\s*=\s*")
_ASSIGNMENT = re.compile(r"(?<![\w.])([a-zA-Z]\w{0,2})\s*=\s*\$?(" + NUMBER_PATTERN.pattern + r")")

Answer = Union[str, list, None]


def answer_from_text(text: str, kind: str, choices: Sequence[str] = (), question: str = "") -> Answer:
    """The answer a chain-of-thought text gives (see the module docstring); ``question`` orders
    the named values of a ``numbers`` answer (:mod:`del_core.evaluation.answers.unknowns`)."""
    if boxes_hedge(text, kind):
        return None
    segment = answer_segment(text)
    if segment is not None and segment_hedges(segment, kind, choices):
        return None
    if segment is None and final_statement_hedges(text, kind):
        return None
    if kind == "choice":
        return _choice(text, segment, choices)
    if kind == "math":
        return _math_answer(text, segment)
    if kind == "numbers":
        return _numbers_answer(text, segment, question)
    if segment is not None:
        return in_asked_currency(_number_in_segment(segment), segment, question)
    if gives_up(text):
        return None
    found = find_numbers(_without_asides(text)) or find_numbers(text)
    return found[-1] if found else None


_ASIDE = re.compile(r"\s*\([^()]*[a-zA-Z]{2}[^()]*\)")


def _without_asides(text: str) -> str:
    """``text`` without parenthesised asides that hold words ("18 (she sells 9 eggs at $2 each)"):
    working written after the answer, not the answer."""
    return _ASIDE.sub("", text)


_ASKS_CENTS = re.compile(r"\bin cents\b|\bhow many cents\b", re.I)
_DOLLARS = re.compile(r"\$|\bdollars?\b", re.I)


def in_asked_currency(value: Optional[str], segment: str, question: str) -> Optional[str]:
    """An amount in the unit of the currency the question asks for: "45 cents" -> "0.45" when the
    question counts dollars; "$0.45" / "0.45 dollars" (two decimal places) -> "45" when it asks in
    cents ("in cents", "how many cents"); anything else unchanged."""
    if value is None or not question or parse_number(value) is None:
        return value
    at = segment.find(value.split(",")[0])
    after, before = segment[at + len(value) :] if at >= 0 else "", segment[:at] if at >= 0 else ""
    if _ASKS_CENTS.search(question):
        cents_written = re.fullmatch(r"-?\d*\.\d\d", value)  # "$0.45"; a loose "$90" stays 90
        if cents_written and (before.rstrip().endswith("$") or re.match(r"\s*dollars?\b", after, re.I)):
            return decimal_text(parse_number(value) * 100)
    elif _DOLLARS.search(question) and re.match(r"\s*(?:cents?\b|¢)", after, re.I):
        return decimal_text(parse_number(value) / 100)
    return value


def _number_in_segment(segment: str) -> Optional[str]:
    """The one number a segment answers with (see the module docstring)."""
    segment = spaced_thousands(re.sub(r"^([\s$*]*)-\s+(?=\d)", r"\1-", segment))
    while chain := _ARITHMETIC_CHAIN.match(segment):
        segment = segment[chain.end() :]
    if values_hedged(SENTENCE_END.split(segment)[0]):
        return None
    found = find_numbers(segment)
    if not found:
        worded = number_from_words(SENTENCE_END.split(segment)[0])
        return None if worded is None else str(worded)
    return found[0]


def _boxed_statement(text: str) -> Optional[str]:
    """The sentence(s) holding two or more boxes with numbers, each box replaced by its value
    ("\\boxed{x = 4}" -> "4"), or None."""
    boxes = [(start, end, content) for start, end, content in boxed_spans(text) if find_numbers(content)]
    if len(boxes) < 2:
        return None
    start = max((m.end() for m in SENTENCE_END.finditer(text, 0, boxes[0][0])), default=0)
    after = SENTENCE_END.search(text, boxes[-1][1])
    pieces, cursor = [], start
    for box_start, box_end, content in boxes:
        pieces += [text[cursor:box_start], _box_value(content)]
        cursor = box_end
    return "".join(pieces) + text[cursor : after.start() if after else len(text)]


def _box_value(box: str) -> str:
    """The number a box holds: after its last "=" ("x = 4"), else its last number."""
    after = find_numbers(box.split("=")[-1])
    return after[0] if after else find_numbers(box)[-1]


def _numbers_answer(text: str, segment: Optional[str], question: str) -> Optional[list]:
    boxed = _boxed_statement(text)
    if boxed is not None:
        return in_asked_order(boxed, question)
    if segment is not None and not find_numbers(segment) and number_from_words(segment) is not None:
        return [str(number_from_words(segment))]
    if segment is not None and find_numbers(segment):
        return None if values_hedged(segment) else in_asked_order(spaced_thousands(segment), question)
    sentences = [sentence for sentence in SENTENCE_END.split(_without_asides(text)) if find_numbers(sentence)]
    if not sentences or gives_up(text):
        return None
    if _ASSIGNMENT.search(sentences[-1]):
        return _last_assignments(text)
    return None if values_hedged(sentences[-1]) else in_asked_order(sentences[-1], question)


def _last_assignments(text: str) -> list[str]:
    """The values of the last run of "name = number" statements: going back from the end, each
    unknown's last value until an unknown repeats, in the order they were written."""
    run: dict[str, str] = {}
    for match in reversed(list(_ASSIGNMENT.finditer(text))):
        before = text[: match.start()].rstrip()
        if before.endswith(("+", "-", "*", "/", "^")):  # part of an equation: "x + y = 10"
            continue
        name = match.group(1).lower()
        if name in run:
            break
        run[name] = match.group(2)
    return list(reversed(list(run.values())))


def _math_answer(text: str, segment: Optional[str]) -> Optional[str]:
    if segment is not None:
        segment = segment.replace("\\$", "")  # a currency sign, not a math delimiter
        solutions = solution_set(re.split(r"\.\s+(?=[A-Z])", segment)[0])
        if solutions is not None:
            return solutions
        dollars = re.match(r"\s*\$([^$]+)\$", segment) or re.match(r"[A-Za-z ,:]*?\$([^$]+)\$", segment)
        if dollars:
            return clean_segment(dollars.group(1)) or None
        segment = re.split(r"\.\s+(?=[A-Z])", segment)[0]
        worded = None if find_numbers(segment) else number_from_words(segment)
        return str(worded) if worded is not None else clean_segment(segment) or None
    if gives_up(text):
        return None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) == 1:
        return clean_segment(lines[0]) or None
    spans = re.findall(r"\$([^$]+)\$", lines[-1]) if lines else []
    if spans:  # "So the result is $\frac{1}{14}\sqrt{7}$."
        return clean_segment(spans[-1]) or None
    found = find_numbers(text)
    return found[-1] if found else None


_CHOICE_STATEMENTS = (
    r"(?:option|choice)\s*\(?{letter}\)?\s+is\s+(?:the\s+)?(?:correct|right|true)",
    r"(?<![\w(]){letter}\)?\s+is\s+(?:the\s+)?(?:correct|right|best)(?:\s+(?:answer|option|choice))?\b",
    r"(?:correct|right|best)\s+(?:option|choice)\s+is\s*:?\s*\(?{letter}(?![a-zA-Z])",
)


def _choice(text: str, segment: Optional[str], choices: Sequence[str]) -> Optional[str]:
    letters = LETTERS[: len(choices)] if choices else LETTERS
    letter = rf"\(?([{letters}])"
    if segment is not None:
        return _choice_in_segment(segment, letters, choices)
    stated = [m for pattern in _CHOICE_STATEMENTS for m in re.finditer(pattern.format(letter=letter), text, re.I)]
    if stated:
        return max(stated, key=lambda m: m.start()).group(1).upper()
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for candidate in (text, lines[-1] if lines else ""):
        bare = re.fullmatch(rf"[\s*]*(?:answer\s*)?{letter}\)?[.:]?[\s*]*", candidate, re.I)
        if bare and (bare.group(1).isupper() or "(" in candidate):
            return bare.group(1).upper()
    return _choice_in_last_line(lines[-1], letters, choices) if lines else None


_NOT_COMMITTED = re.compile(r"\b(?:not|wrong|incorrect|eliminat\w*|too|maybe|perhaps|either|unsure)\b", re.I)


def _choice_in_last_line(line: str, letters: str, choices: Sequence[str]) -> Optional[str]:
    """The choice a final line without an answer phrase commits to (module docstring), or None."""
    mentioned = set(re.findall(rf"\(([{letters}])\)", line))
    own_words = line
    for choice in sorted(choices, key=len, reverse=True):  # an option's own "not" is no elimination
        own_words = own_words.replace(choice, " ") if len(choice) > 3 else own_words
    if len(mentioned) > 1 or _NOT_COMMITTED.search(own_words):  # an echoed option list, a hedge, an elimination
        return None
    lead = re.match(rf"[\s*]*(option\s+|choice\s+)?(\()?([{letters}])(?:\)|:|\.?\s*$)", line, re.I)
    if lead and (lead.group(3).isupper() or lead.group(1) or lead.group(2)):
        return lead.group(3).upper()
    if mentioned:
        return mentioned.pop()
    key = _option_key(line)
    worded = [i for i, c in enumerate(choices) if parse_number(_option_key(c)) is None and _option_key(c) in key]
    if len(worded) == 1:
        return LETTERS[worded[0]]
    numbers = find_numbers(line)
    if not numbers or worded:
        return None
    hits = _options_numbered(numbers[-1], choices)
    return LETTERS[hits[0]] if len(hits) == 1 else None


def _choice_in_segment(segment: str, letters: str, choices: Sequence[str]) -> Optional[str]:
    """The letter an answer segment gives (module docstring), or None."""
    key = _option_key(clean_segment(segment))
    worded = [i for i, choice in enumerate(choices) if _option_key(choice) == key and len(key) > 1]
    if len(worded) == 1:  # the segment is an option's text ("A charge per mile of $19.99"), not a letter
        return LETTERS[worded[0]]
    match = re.match(
        rf"[\s:*$]*(?:\\(?:text|textbf|mathbf|mathrm)\{{)?(?:option\s+|choice\s+)?(\()?([{letters}])(?![a-zA-Z])(.*)",
        segment,
        re.I | re.S,
    )
    if match:
        opened, found, rest = match.groups()
        if found.isupper() or opened or re.fullmatch(r"[).:,}*\s]*", rest) or rest.startswith(")"):
            return found.upper()
    named = re.findall(rf"\b(?:option|choice)\s*\(?([{letters}])(?![a-zA-Z])", segment, re.I)
    if named:
        return named[-1].upper()
    letter = rf"\(?([{letters}])"
    stated = [m for pattern in _CHOICE_STATEMENTS for m in re.finditer(pattern.format(letter=letter), segment, re.I)]
    if stated:  # "Answer: The correct option is B"
        return max(stated, key=lambda m: m.start()).group(1).upper()
    return _choice_by_text(clean_segment(segment), choices)


def _option_key(text: str) -> str:
    """An option text for comparison: lower case, no spaces or "$", one kind of dash, no final "."."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[\u2212\u2012\u2013\u2014]", "-", text)
    return re.sub(r"\\[,;! ]|[\s${}\\]", "", text).rstrip(".")


def _choice_by_text(answer: str, choices: Sequence[str]) -> Optional[str]:
    """The letter of the one option whose text equals ``answer`` (module docstring), or whose one
    number equals the answer's number ("12.5 hours" for the option "12.5"); None otherwise."""
    key = _option_key(answer)
    hits = [i for i, choice in enumerate(choices) if _option_key(choice) == key]
    if not hits:
        value = _number_in_segment(answer)
        if value is not None:
            hits = _options_numbered(value, choices)
    return LETTERS[hits[0]] if len(hits) == 1 else None


def _options_numbered(value: str, choices: Sequence[str]) -> list[int]:
    """The indices of the options whose text holds one number, and that number matches ``value``."""
    return [
        i
        for i, choice in enumerate(choices)
        if len(found := find_numbers(choice)) == 1 and numbers_match(value, found[0])
    ]
