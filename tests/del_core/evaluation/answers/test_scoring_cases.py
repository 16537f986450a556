"""Hand-graded scoring cases (``scoring_cases/<benchmark>.jsonl``) against extraction plus scoring.

Each case is a model-style output for one real record of a benchmark file and the verdict a careful
human grader gives it; ``answer_from_text`` followed by ``is_correct`` must agree. See
``scoring_cases/README.md`` for how the cases were made and the grading conventions.
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from del_core.data.jsonl import JsonlError, iter_jsonl
from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.scoring import is_correct
from del_core.evaluation.benchmarks.files import load_benchmark
from del_core.evaluation.question import BENCHMARKS, MULTIPLE_CHOICE
from helpers.shared import benchmark_dir

CASES_DIR = Path(__file__).parent / "scoring_cases"
MIN_CASES = 40
MIN_INDICES = 15
FIELDS = {"index": int, "output": str, "correct": bool, "why": str}


class CaseFileError(ValueError):
    """A case file line that cannot be read (names the file and the line)."""


def read_cases(path: Path) -> list[tuple[int, dict]]:
    """The (line number, case) pairs of a case file (the project's JSON-lines reader), each with
    the fields of ``FIELDS``; blank lines are skipped."""
    cases = []
    for number, case in iter_jsonl(path):
        where = f"{path}: line {number}"
        for key, kind in FIELDS.items():
            if key not in case:
                raise CaseFileError(f"{where}: missing field {key!r}")
            value = case[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise CaseFileError(f"{where}: field {key!r} should be {kind.__name__}, got {type(value).__name__}")
        cases.append((number, case))
    return cases


@cache
def records(name: str) -> tuple:
    return tuple(load_benchmark(name, benchmark_dir()))


def cases_of(name: str) -> list[tuple[int, dict]]:
    return read_cases(CASES_DIR / f"{name}.jsonl")


def _loose(text: str) -> str:
    """Lower case, unicode minus/dashes as '-', no spaces, commas, '$', braces or a leading "B)":
    for spotting an option's text in an output."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[\u2212\u2012\u2013\u2014]", "-", text)
    text = re.sub(r"\\quad|[\s$\\{},]", "", text)
    return re.sub(r"^[a-e]\)", "", text)


def test_case_file_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    good = json.dumps({"index": 0, "output": "The answer is 1.", "correct": True, "why": "ok"})
    path.write_text(good + "\n{not json\n", encoding="utf-8")
    with pytest.raises(JsonlError, match=r"broken\.jsonl: line 2: not valid JSON"):
        read_cases(path)
    path.write_text(good + "\n\n" + json.dumps({"index": 0, "output": "x", "correct": "yes", "why": ""}) + "\n")
    with pytest.raises(CaseFileError, match=r"broken\.jsonl: line 3: field 'correct'"):
        read_cases(path)
    path.write_text(json.dumps({"index": 0, "output": "x", "why": ""}) + "\n")
    with pytest.raises(CaseFileError, match=r"broken\.jsonl: line 1: missing field 'correct'"):
        read_cases(path)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_case_file_is_well_formed(name):
    cases = cases_of(name)
    assert len(cases) >= MIN_CASES, f"{name}: {len(cases)} cases, expected at least {MIN_CASES}"
    indices = {case["index"] for _, case in cases}
    assert len(indices) >= MIN_INDICES, f"{name}: only {len(indices)} distinct records"
    verdicts = [case["correct"] for _, case in cases]
    assert any(verdicts) and not all(verdicts), f"{name}: needs both correct and wrong cases"
    rows = records(name)
    problems = []
    for number, case in cases:
        index = case["index"]
        if not 0 <= index < len(rows):
            problems.append(f"line {number}: index {index} is not a record of {name} ({len(rows)} records)")
            continue
        record = rows[index]
        if name in MULTIPLE_CHOICE and case["correct"]:
            # a correct case must name the gold letter or contain the gold option's text
            gold_text = _loose(record.choices["ABCDE".index(record.gold)])
            letter = re.search(rf"(?<![A-Za-z]){record.gold}(?![A-Za-z])", case["output"], re.I)
            if not letter and gold_text not in _loose(case["output"]):
                problems.append(
                    f"line {number}: index {index} marked correct but names neither {record.gold} nor its option text"
                )
    assert not problems, f"{CASES_DIR / (name + '.jsonl')}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_scoring_agrees_with_hand_grading(name):
    rows = records(name)
    cases = cases_of(name)
    disagreements = []
    for number, case in cases:
        record = rows[case["index"]]
        answer = answer_from_text(case["output"], record.kind, record.choices, record.question)
        verdict = is_correct(answer, record)
        if verdict != case["correct"]:
            tail = case["output"].strip().splitlines()[-1][:70]
            disagreements.append(
                f"  line {number} index {case['index']}: expected {case['correct']}, got {verdict}; "
                f"extracted {answer!r}, gold {record.gold!r}; why: {case['why']}; output ends {tail!r}"
            )
    assert not disagreements, (
        f"{name}: {len(disagreements)} of {len(cases)} hand-graded cases disagree "
        f"({CASES_DIR / (name + '.jsonl')}):\n" + "\n".join(disagreements)
    )
