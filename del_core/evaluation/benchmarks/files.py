"""The seven benchmark files, read into :class:`~del_core.evaluation.question.Record` (its
``kind`` says how an answer is compared).

Every benchmark file is read whole; ``Record.index`` is the question's position in its file (the
``index`` of ``--score-only`` rows). A row that cannot be read raises :class:`BenchmarkError`
naming the file, the row and the field.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Optional, Union

from del_core.data.jsonl import JsonlError, read_jsonl
from del_core.evaluation.answers.segments import last_boxed
from del_core.evaluation.question import BENCHMARKS, LETTERS, Record, choices_text

DATA_DIR_ENV = "DEL_BENCHMARK_DIR"
FILES = {
    "gsm8k": "gsm8k/gsm8k.jsonl",
    "math": "math/test.jsonl",
    "svamp": "svamp/SVAMP.json",
    "simuleq": "simuleq/simuleq.json",
    "aqua": "aqua/AQuA.json",
    "sat": "sat/sat.json",
    "mmlu_mathematics": "mmlu_mathematics/mathematics.json",
}


class BenchmarkError(ValueError):
    """A benchmark file, row or field that cannot be read."""


# The test sets the repository carries (data/benchmarks/ beside del_core/): found from this file, so
# a checkout or an editable install has them; a wheel installed into site-packages does not.
REPOSITORY_DATA_DIR = Path(__file__).resolve().parents[3] / "data" / "benchmarks"


def data_dir_from(flag: Optional[str]) -> Path:
    """The benchmark directory: ``flag``, else ``$DEL_BENCHMARK_DIR``, else the repository's
    ``data/benchmarks``; a :class:`BenchmarkError` naming what is missing otherwise."""
    value = flag or os.environ.get(DATA_DIR_ENV)
    if not value:
        if REPOSITORY_DATA_DIR.is_dir():
            return REPOSITORY_DATA_DIR
        raise BenchmarkError(
            f"no benchmark directory: {REPOSITORY_DATA_DIR} does not exist (del_core is installed "
            f"outside a checkout of the repository, which carries data/benchmarks/); pass data_dir=DIR "
            f"or set {DATA_DIR_ENV} (DIR holds {', '.join(sorted({f.split('/')[0] for f in FILES.values()}))})"
        )
    path = Path(value)
    if not path.is_dir():
        raise BenchmarkError(f"benchmark directory not found: {path}")
    return path


def parse_benchmark_list(text: str) -> tuple:
    """``"gsm8k,svamp"`` -> ("gsm8k", "svamp"); ``"all"`` -> all seven; unknown names are an error."""
    if text.strip() == "all":
        return BENCHMARKS
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FILES]
    if unknown or not names:
        raise BenchmarkError(f"unknown benchmark(s) {unknown or text!r}; choose from {', '.join(BENCHMARKS)} or all")
    return names


def load_benchmark(name: str, data_dir: Union[str, os.PathLike], limit: Optional[int] = None) -> list[Record]:
    """The records of one benchmark in file order (the first ``limit`` when given)."""
    if name not in FILES:
        raise BenchmarkError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    path = Path(data_dir) / FILES[name]
    rows = _read_rows(path)
    if limit is not None:
        rows = rows[:limit]
    records = []
    for index, row in enumerate(rows):
        where = f"{path} row {index}"
        if not isinstance(row, dict):
            raise BenchmarkError(f"{where}: expected an object, got {type(row).__name__}")
        records.append(_READERS[name](row, index, where))
    return records


def _read_rows(path: Path) -> list:
    """The rows of a benchmark file: one JSON array, or JSON lines (read by :mod:`del_core.data.jsonl`)."""
    if not path.is_file():
        raise BenchmarkError(f"benchmark file not found: {path}")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise BenchmarkError(f"{path}: not valid JSON ({err})") from None
    try:
        return read_jsonl(path)
    except JsonlError as err:
        raise BenchmarkError(str(err)) from None


def _field(row: dict, key: str, where: str, types=(str,)):
    if key not in row:
        raise BenchmarkError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, types) or isinstance(value, bool):
        raise BenchmarkError(f"{where}: field {key!r} has type {type(value).__name__}")
    return value


_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")


def _gold_number(text: str, where: str, key: str) -> str:
    value = text.strip().replace(",", "")
    if not _NUMBER.fullmatch(value):
        raise BenchmarkError(f"{where}: field {key!r} is not a number: {text!r}")
    return value


def _float_text(value: float) -> str:
    """51.0 -> "51"; 0.5 -> "0.5" (SVAMP writes every answer as a float)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _gsm8k(row, index, where):
    answer = _field(row, "answer", where)
    if "####" not in answer:
        raise BenchmarkError(f"{where}: field 'answer' has no '#### <number>' line")
    return Record(
        "gsm8k",
        index,
        _field(row, "question", where).strip(),
        _gold_number(answer.split("####")[-1], where, "answer"),
        "number",
    )


def _svamp(row, index, where):
    body = _field(row, "Body", where).strip()
    question = _field(row, "Question", where).strip()
    answer = _field(row, "Answer", where, (int, float))
    return Record("svamp", index, f"{body} {question}", _float_text(answer), "number")


def _simuleq(row, index, where):
    answer = row.get("answer")
    if isinstance(answer, str) and answer.strip().startswith("["):
        try:
            answer = json.loads(answer)
        except json.JSONDecodeError:
            raise BenchmarkError(f"{where}: field 'answer' is not a JSON list: {answer!r}") from None
    if isinstance(answer, list):
        gold = [_gold_number(str(v), where, "answer") for v in answer]
        if not gold:
            raise BenchmarkError(f"{where}: field 'answer' is an empty list")
        return Record("simuleq", index, _field(row, "question", where).strip(), gold, "numbers")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = _float_text(answer)
    answer = _field({"answer": answer}, "answer", where)
    return Record(
        "simuleq", index, _field(row, "question", where).strip(), [_gold_number(answer, where, "answer")], "numbers"
    )


def _aqua(row, index, where):
    options = _field(row, "options", where, (list,))
    choices = []
    for i, option in enumerate(options):
        match = re.match(r"\s*\(?([A-E])\)\s*(.*)", str(option), re.S)
        if not match or match.group(1) != LETTERS[i]:
            raise BenchmarkError(
                f"{where}: option {i} of field 'options' does not start with '{LETTERS[i]})': {option!r}"
            )
        text = match.group(2).strip()
        if text.startswith(f"{LETTERS[i]})"):  # a few rows repeat the letter: "A)A)59"
            text = text[2:].strip()
        choices.append(text)
    gold = _field(row, "correct", where).strip()
    if gold not in LETTERS[: len(choices)]:
        raise BenchmarkError(f"{where}: field 'correct' is {gold!r}, not one of the {len(choices)} options")
    question = _field(row, "question", where).strip()
    return Record("aqua", index, f"{question}\nAnswer Choices: {choices_text(choices)}", gold, "choice", tuple(choices))


def _sat(row, index, where):
    question = _field(row, "question", where).strip()
    head, sep, options = question.rpartition("Answer Choices:")
    parts = re.split(r"\(([A-E])\)", options)
    letters, texts = parts[1::2], [t.strip() for t in parts[2::2]]
    if not sep or not letters or "".join(letters) != LETTERS[: len(letters)]:
        raise BenchmarkError(f"{where}: field 'question' has no 'Answer Choices: (A) .. (B) ..' list")
    gold = _field(row, "answer", where).strip()
    if gold not in letters:
        raise BenchmarkError(f"{where}: field 'answer' is {gold!r}, not one of {''.join(letters)}")
    return Record("sat", index, question, gold, "choice", tuple(texts))


def _mmlu(row, index, where):
    choices = [str(c).strip() for c in _field(row, "choices", where, (list,))]
    answer = _field(row, "answer", where, (int,))
    if not 0 <= answer < len(choices):
        raise BenchmarkError(f"{where}: field 'answer' is {answer}, not an index into {len(choices)} choices")
    question = _field(row, "question", where).strip()
    return Record(
        "mmlu_mathematics",
        index,
        f"{question}\nAnswer Choices: {choices_text(choices)}",
        LETTERS[answer],
        "choice",
        tuple(choices),
    )


def _math(row, index, where):
    solution = _field(row, "solution", where)
    gold = last_boxed(solution)
    if gold is None or not gold.strip():
        raise BenchmarkError(f"{where}: field 'solution' has no \\boxed{{..}} answer")
    return Record("math", index, _field(row, "problem", where).strip(), gold.strip(), "math")


_READERS: dict[str, Callable] = {
    "gsm8k": _gsm8k,
    "math": _math,
    "svamp": _svamp,
    "simuleq": _simuleq,
    "aqua": _aqua,
    "sat": _sat,
    "mmlu_mathematics": _mmlu,
}
