"""Graders written independently of the project's scorer, for differential grading.

Each grader takes an output (a chain of thought, or what a program printed), the record, and the
channel ("text" | "program"), and returns its verdict. None of them uses the project's readers
(``extract``, ``program_output``, ``segments``, ``hedges``) or ``scoring``: each reads the answer its
own way.

  math_verify   math-verify alone: its own extraction from the whole output (LaTeX, boxes, plain
                expressions; letters for multiple choice) compared with the gold by its ``verify``.
  mammoth       answer cleaning in the style of the MAmmoTH release, written from its description:
                the text after the last "The answer is" (else the whole output); multiple choice:
                the first standalone letter A-E there (the last in the whole output when there is
                no answer phrase); numbers: commas removed, the first number after the phrase
                (else the output's last number), equal to the gold within 1e-3 (absolute, or
                relative for golds above 1); MATH answers that are no number: equal text after
                removing spaces and "$".
  strict        the last ``\\boxed{..}``, else the rest of the line after the last "answer is",
                else the last line; it must be exactly the answer: a letter ("B", "(B)", "B.") or
                one number equal to the gold ("$" and thousands commas aside), or for MATH the
                gold's text (spaces and "$" aside).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Optional

from del_core.evaluation.question import LETTERS, Record

_NUMBER = re.compile(r"-?\d*\.?\d+")


def _gold_text(record: Record) -> str:
    return record.gold[0] if isinstance(record.gold, list) else record.gold


def _exact(text: str) -> Optional[Fraction]:
    text = text.strip().replace(",", "").lstrip("$")
    try:
        if "/" in text:
            num, den = text.split("/")
            return Fraction(num) / Fraction(den)
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _last_box(text: str) -> Optional[str]:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed")
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin + 1 : i]
    return None


# --- math-verify alone ---------------------------------------------------------------------


def grade_math_verify(output: str, record: Record, channel: str) -> bool:
    """math-verify's own extraction and comparison (module docstring)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig, parse, verify

    try:
        if record.kind == "choice":
            config = [StringExtractionConfig(strings=tuple(LETTERS[: len(record.choices)]))]
            gold, found = parse(record.gold, extraction_config=config), parse(output, extraction_config=config)
        else:
            config = [LatexExtractionConfig(), ExprExtractionConfig()]
            gold, found = parse(f"${_gold_text(record)}$", extraction_config=config), parse(output, config)
        return bool(gold and found and verify(gold, found))
    except Exception:  # noqa: BLE001 - a checker failure is a "not verified"
        return False


# --- MAmmoTH-style answer cleaning -----------------------------------------------------------


def mammoth_answer(output: str, kind: str) -> Optional[str]:
    """The answer MAmmoTH-style cleaning reads (module docstring)."""
    parts = re.split(r"[Tt]he answer is", output)
    after_phrase = len(parts) > 1
    text = parts[-1].strip()
    if kind == "choice":
        letters = re.findall(r"(?<![A-Za-z])([A-E])(?![A-Za-z])", text)
        if not letters:
            return None
        return letters[0] if after_phrase else letters[-1]
    if kind == "math" and after_phrase:
        return text.split("\n")[0].strip().rstrip(".").strip("$ ")
    numbers = _NUMBER.findall(text.replace(",", ""))
    if not numbers:
        return None
    return numbers[0] if after_phrase else numbers[-1]


def grade_mammoth(output: str, record: Record, channel: str) -> bool:
    answer = mammoth_answer(output, record.kind)
    if answer is None:
        return False
    if record.kind == "choice":
        return answer == record.gold
    gold = _gold_text(record)
    p, g = _exact(answer), _exact(gold)
    if p is not None and g is not None:
        return abs(p - g) <= Fraction(1, 1000) * max(1, abs(g))
    return re.sub(r"[\s$]", "", answer) == re.sub(r"[\s$]", "", gold)


# --- strict last box / last "answer is" -----------------------------------------------------


def strict_segment(output: str) -> Optional[str]:
    box = _last_box(output)
    if box is not None:
        return box.strip()
    found = list(re.finditer(r"answer is", output, re.I))
    if found:
        return output[found[-1].end() :].split("\n")[0].strip()
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None


def grade_strict(output: str, record: Record, channel: str) -> bool:
    segment = strict_segment(output)
    if segment is None:
        return False
    segment = segment.strip().rstrip(".").strip()
    if record.kind == "choice":
        match = re.fullmatch(r"\(?([A-E])\)?", segment)
        return bool(match) and match.group(1) == record.gold
    gold = _gold_text(record)
    bare = re.sub(r"^\$|\$$", "", segment).strip()
    p, g = _exact(bare.replace("\\$", "")), _exact(gold)
    if p is not None and g is not None and re.fullmatch(r"-?[\d,]*\.?\d+", bare.lstrip("\\$")):
        return p == g
    return re.sub(r"\s", "", bare) == re.sub(r"\s", "", gold)


GRADERS: dict[str, Callable[[str, Record, str], bool]] = {
    "math_verify": grade_math_verify,
    "mammoth": grade_mammoth,
    "strict": grade_strict,
}
