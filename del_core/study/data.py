"""The study's data: rows of :data:`del_core.data.synthetic.STUDY_SET`, each solved either in worked
steps or by a short Python program, split into training and held-out rows with no shared question.

A row is MathInstruct-style: ``instruction`` (the question; program-style rows end with
" Let's write a program.", the program-of-thought cue of :mod:`del_core.evaluation.prompts`),
``input`` (empty), ``output`` (the solution, always ending "The answer is X."), plus ``answer``
(the exact answer as text), ``family`` (which generator) and ``style`` (steps | program).

    steps:    "12 * 2.35 = 28.2\\nThe answer is 28.2."
    program:  "```python\\ncount = 12\\nprice = 2.35\\ntotal = count * price\\nprint(round(total, 2))\\n```\\n
               The answer is 28.2."

Every program prints the answer (the tests run them).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from del_core.data.jsonl import read_jsonl, write_jsonl
from del_core.data.synthetic import STUDY_SET, Problem
from del_core.evaluation.prompts import PROGRAM_SUFFIX
from del_core.study.config import StudyConfig, StudyError, StudyPaths

STYLES = ("steps", "program")


def to_row(problem: Problem, style: str, family: str) -> dict[str, str]:
    """The row of ``problem`` written in ``style`` (steps | program)."""
    answer = STUDY_SET.answer(problem.answer)
    final = f"The answer is {answer}."
    if style == "steps":
        return {
            "instruction": problem.question,
            "input": "",
            "output": "\n".join(problem.steps) + "\n" + final,
            "answer": answer,
            "family": family,
            "style": style,
        }
    if style == "program":
        code = "\n".join(problem.program)
        return {
            "instruction": problem.question + PROGRAM_SUFFIX,
            "input": "",
            "output": f"```python\n{code}\n```\n{final}",
            "answer": answer,
            "family": family,
            "style": style,
        }
    raise ValueError(f"unknown solution style {style!r}; choose from {', '.join(STYLES)}")


def make_rows(count: int, seed: int, program_share: float = 0.5, exclude: Sequence[str] = ()) -> list[dict[str, str]]:
    """``count`` rows with distinct instructions, none in ``exclude``; the same for the same
    arguments. A share ``program_share`` of them (in expectation) is written as programs."""
    if count < 0 or not 0.0 <= program_share <= 1.0:
        raise ValueError(f"count must be >= 0 and program_share in [0, 1], got {count}, {program_share}")
    rng = random.Random(seed)
    seen = set(exclude)
    rows: list[dict[str, str]] = []
    attempts = 0
    while len(rows) < count:
        attempts += 1
        if attempts > 100 * count + 1000:
            raise RuntimeError(f"could not draw {count} distinct problems with seed {seed}")
        family, problem = STUDY_SET.draw(rng)
        style = "program" if rng.random() < program_share else "steps"
        row = to_row(problem, style, family)
        if row["instruction"] in seen:
            continue
        seen.add(row["instruction"])
        rows.append(row)
    return rows


def make_splits(train_size: int, heldout_size: int, seed: int, program_share: float = 0.5) -> tuple[list, list]:
    """(training rows, held-out rows): the held-out split uses seed ``seed + 1`` and shares no
    instruction with the training split."""
    train = make_rows(train_size, seed, program_share)
    heldout = make_rows(heldout_size, seed + 1, program_share, exclude=[r["instruction"] for r in train])
    return train, heldout


def heldout_split_size(config: StudyConfig) -> int:
    """Rows of the held-out split: train.py evaluates the first ``heldout_size`` teacher-forced; the
    greedy answers take the first ``heldout_generate`` rows of the wanted styles, so the split holds
    ``4 * heldout_generate`` rows at least (either style is drawn about half the time)."""
    return max(config.heldout_size, 4 * config.heldout_generate)


def prepare_data(config: StudyConfig, paths: StudyPaths) -> None:
    """Write ``paths.train_data`` and ``paths.heldout_data`` once (deterministic from the config)."""
    if paths.train_data.is_file() and paths.heldout_data.is_file():
        return
    train, heldout = make_splits(config.train_size, heldout_split_size(config), config.data_seed, config.program_share)
    write_jsonl(paths.train_data, train)
    write_jsonl(paths.heldout_data, heldout)
    print(f"[study] data: {len(train)} training and {len(heldout)} held-out problems in {paths.data}", flush=True)


def generation_rows(config: StudyConfig, heldout_path: Path) -> list[dict]:
    """The held-out rows answered by greedy generation: the first ``heldout_generate`` rows whose
    solution style is in ``generate_styles``; StudyError when the split holds fewer."""
    rows = [r for r in read_jsonl(heldout_path) if r.get("style", "steps") in config.generate_styles]
    if len(rows) < config.heldout_generate:
        raise StudyError(
            f"{heldout_path} has {len(rows)} rows of styles {list(config.generate_styles)}, fewer than "
            f"heldout_generate {config.heldout_generate}; raise heldout_size or program_share"
        )
    return rows[: config.heldout_generate]
