"""Answers out of model outputs: the program of a program-of-thought output, the answer printed by a
program, and the answer written in a chain-of-thought text. None means "no answer" (for multiple
choice: unanswered; there is no default letter).

Text answers (:func:`answer_from_text`). The answer segment is the last ``\\boxed{..}``, else
what follows the last "answer is", "answer:" or "####" (markdown bold around it ignored).
Hedges, on every kind (docs/grading.md): an output boxing two different answers is no answer
(numbers: boxes are the unknowns, so only boxes joined by "or" / "maybe"); so is a segment that
joins two different letters by "or", "and", "and/or", "/", "or maybe" ("A or C", "(A) or (C)"), or
two different values by "or", "either", "possibly", "maybe", "perhaps" or after "between"
("18 (or possibly 19)", "between 18 and 19"). An option's own words are no hedge or elimination.
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
    (:mod:`del_core.evaluation.unknowns`: "9 poets and 15 novelists" answers "How many novelists
    ..? How many poets ..?" with 15, 9). A hedge ("30 or 32") is no answer.
  * math: the segment up to the end of its sentence (its first ``$..$`` when it starts with one or
    with words, "The result comes to $x$."; an escaped ``\\$`` is a currency sign),
    else the whole output when it is one line, else the last ``$..$`` of the last line, else the
    text's last number (a segment whose braces are open runs on to the line where they close).
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
Program output: the last non-empty line that is not a label of words ("Done.", "That is the
answer."): number: its last number; math: the line, with the lines before it when its braces close
an earlier line's, without a printed label ("answer: ", "x = ") and sympy's printing read as LaTeX
(:func:`sympy_as_latex`: "9*pi", "Interval.Lopen(2, 5)"); choice: read as text;
numbers: the numbers of the last line that has any, or every line's number when each printed line
holds exactly one.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Sequence
from typing import Optional, Union

from del_core.evaluation.benchmarks import LETTERS, boxed_spans, last_boxed
from del_core.evaluation.math_equivalence import inequality_as_interval
from del_core.evaluation.numbers import (
    NUMBER_PATTERN,
    decimal_text,
    find_numbers,
    number_from_words,
    numbers_match,
    parse_number,
    spaced_thousands,
)
from del_core.evaluation.unknowns import in_asked_order

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)
_ANSWER_IS = re.compile(r"(?:answer\s+is|answer\s*:|####)[\s*:]*", re.I)
_HEDGE_WORDS = re.compile(r"\bor\b|\beither\b|\bpossibly\b|\bmaybe\b|\bperhaps\b", re.I)
_ARITHMETIC_CHAIN = re.compile(r"^[\s$]*[-+]?[\d.,]+(?:\s*[-+*/×x÷^]\s*\(?[\d.,]+\)?)+\s*=\s*")
_SENTENCE_END = re.compile(r"(?<!\d)\.(?!\d)|\n")  # a point that is not a decimal point, or a line end
_ASSIGNMENT = re.compile(r"(?<![\w.])([a-zA-Z]\w{0,2})\s*=\s*\$?(" + NUMBER_PATTERN.pattern + r")")

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
        while start > 0 and _brace_depth("\n".join(lines[start:])) < 0:  # printed over several lines
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
        if _brace_depth(segment) <= 0:
            break
        segment += "\n" + line
    return segment.strip() or None


def _brace_depth(text: str) -> int:
    return text.count("{") - text.count("}")


def _clean_segment(segment: str) -> str:
    """Without surrounding "$", "*", spaces and a final "."."""
    previous = None
    while previous != segment:
        previous, segment = segment, segment.strip().strip("$*").rstrip(".")
    return segment


def answer_from_text(text: str, kind: str, choices: Sequence[str] = (), question: str = "") -> Answer:
    """The answer a chain-of-thought text gives (see the module docstring); ``question`` orders
    the named values of a ``numbers`` answer (:mod:`del_core.evaluation.unknowns`)."""
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


_GIVES_UP = re.compile(
    r"\b(?:cannot|can't|unable to|not sure|don't know|do not know|no way to|not enough|insufficient|impossible)\b", re.I
)


def gives_up(text: str) -> bool:
    """Whether the output ends by saying it has no answer: a last line with no number that says it
    cannot finish ("I cannot finish this computation.")."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return bool(lines) and not find_numbers(lines[-1]) and bool(_GIVES_UP.search(lines[-1]))


_ASIDE = re.compile(r"\s*\([^()]*[a-zA-Z]{2}[^()]*\)")


def _without_asides(text: str) -> str:
    """``text`` without parenthesised asides that hold words ("18 (she sells 9 eggs at $2 each)"):
    working written after the answer, not the answer."""
    return _ASIDE.sub("", text)


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


def _values_hedged(statement: str) -> bool:
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
    sentences = [sentence for sentence in _SENTENCE_END.split(lines[-1]) if find_numbers(sentence)]
    return bool(sentences) and _values_hedged(sentences[-1])


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
    first = _SENTENCE_END.split(segment)[0] if kind != "math" else segment
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
        if inequality_as_interval(_clean_segment(first)) is not None or solution_set(first) is not None:
            return False
        return (
            _spans_hedged(first)
            or _plain_range(first)
            or bool(_OR.search(re.sub(r"\\text\{\s*(?!or\b)[^{}]*\}", " ", first)))
        )
    return bool(_values_hedged(first))


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
    if _values_hedged(_SENTENCE_END.split(segment)[0]):
        return None
    found = find_numbers(segment)
    if not found:
        worded = number_from_words(_SENTENCE_END.split(segment)[0])
        return None if worded is None else str(worded)
    return found[0]


def _boxed_statement(text: str) -> Optional[str]:
    """The sentence(s) holding two or more boxes with numbers, each box replaced by its value
    ("\\boxed{x = 4}" -> "4"), or None."""
    boxes = [(start, end, content) for start, end, content in boxed_spans(text) if find_numbers(content)]
    if len(boxes) < 2:
        return None
    start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, boxes[0][0])), default=0)
    after = _SENTENCE_END.search(text, boxes[-1][1])
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
        return None if _values_hedged(segment) else in_asked_order(spaced_thousands(segment), question)
    sentences = [sentence for sentence in _SENTENCE_END.split(_without_asides(text)) if find_numbers(sentence)]
    if not sentences or gives_up(text):
        return None
    if _ASSIGNMENT.search(sentences[-1]):
        return _last_assignments(text)
    return None if _values_hedged(sentences[-1]) else in_asked_order(sentences[-1], question)


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
            return _clean_segment(dollars.group(1)) or None
        segment = re.split(r"\.\s+(?=[A-Z])", segment)[0]
        worded = None if find_numbers(segment) else number_from_words(segment)
        return str(worded) if worded is not None else _clean_segment(segment) or None
    if gives_up(text):
        return None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) == 1:
        return _clean_segment(lines[0]) or None
    spans = re.findall(r"\$([^$]+)\$", lines[-1]) if lines else []
    if spans:  # "So the result is $\frac{1}{14}\sqrt{7}$."
        return _clean_segment(spans[-1]) or None
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
    key = _option_key(_clean_segment(segment))
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
    return _choice_by_text(_clean_segment(segment), choices)


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
