"""The study's data: rows of one problem set of :mod:`del_core.data.synthetic` (``problem_set``:
STUDY_SET by default, BASIC_SET for a 135M model), each solved in worked steps, by a short Python
program, or by the steps' equations alone, split into training and held-out rows with no shared question.

A row is MathInstruct-style: ``instruction`` (the question; program-style rows end with
" Let's write a program.", the program-of-thought cue of :mod:`del_core.evaluation.benchmarks.prompts`),
``input`` (empty), ``output`` (the solution, always ending "The answer is X."), plus ``answer``
(the exact answer as text), ``family`` (which generator) and ``style`` (steps | program | equation).
With a ``system_prompt`` the row also carries ``messages``: that system turn, the question as the user
turn and the output as the assistant turn; training, teacher forcing and generation then read the
conversation (:func:`del_core.data.rows.is_conversation`), the scorers ``instruction`` and ``answer``.

    steps:    "12 * 2.35 = 28.2\\nThe answer is 28.2."
    program:  "```python\\ncount = 12\\nprice = 2.35\\ntotal = count * price\\nprint(round(total, 2))\\n```\\n
               The answer is 28.2."
    equation: "12 * 2.35 = 28.2"  (the worked steps alone: the output's last number is the answer,
               computed there, not copied from an earlier step; its teacher-forced accuracy is
               the answer's, :mod:`del_core.evaluation.heldout.teacher_forced`)

Every program prints the answer (the tests run them).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from del_core.data.jsonl import read_jsonl, write_jsonl
from del_core.data.prompting import alpaca_messages, system_turn
from del_core.data.synthetic import Problem, ProblemSet, problem_set
from del_core.evaluation.benchmarks.prompts import PROGRAM_SUFFIX
from del_core.experiments.study.config import StudyConfig, StudyError, StudyPaths

STYLES = ("steps", "program", "equation")


def to_row(problem: Problem, style: str, family: str, problems: ProblemSet) -> dict[str, str]:
    """The row of ``problem`` (drawn from ``problems``) written in ``style`` (steps | program | equation)."""
    answer = problems.answer(problem.answer)
    final = f"The answer is {answer}."
    if style == "equation":
        return {
            "instruction": problem.question,
            "input": "",
            "output": "\n".join(problem.steps),
            "answer": answer,
            "family": family,
            "style": style,
        }
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


def make_rows(
    count: int,
    seed: int,
    program_share: float = 0.5,
    exclude: Sequence[str] = (),
    set_name: str = "study",
    other_style: str = "steps",
) -> list[dict[str, str]]:
    """``count`` rows of problem set ``set_name`` with distinct instructions, none in ``exclude``;
    the same for the same arguments. A share ``program_share`` of them (in expectation) is written
    as programs, the others in ``other_style`` (steps | equation)."""
    if count < 0 or not 0.0 <= program_share <= 1.0:
        raise ValueError(f"count must be >= 0 and program_share in [0, 1], got {count}, {program_share}")
    if other_style not in ("steps", "equation"):
        raise ValueError(f"other_style must be steps or equation, got {other_style!r}")
    problems = problem_set(set_name)
    rng = random.Random(seed)
    seen = set(exclude)
    rows: list[dict[str, str]] = []
    attempts = 0
    while len(rows) < count:
        attempts += 1
        if attempts > 100 * count + 1000:
            raise RuntimeError(f"could not draw {count} distinct problems with seed {seed}")
        family, problem = problems.draw(rng)
        style = "program" if rng.random() < program_share else other_style
        row = to_row(problem, style, family, problems)
        if row["instruction"] in seen:
            continue
        seen.add(row["instruction"])
        rows.append(row)
    return rows


def make_splits(
    train_size: int,
    heldout_size: int,
    seed: int,
    program_share: float = 0.5,
    set_name: str = "study",
    other_style: str = "steps",
) -> tuple[list, list]:
    """(training rows, held-out rows) of :func:`make_rows`: the held-out split uses seed
    ``seed + 1`` and shares no instruction with the training split."""
    train = make_rows(train_size, seed, program_share, set_name=set_name, other_style=other_style)
    taken = [r["instruction"] for r in train]
    heldout = make_rows(heldout_size, seed + 1, program_share, taken, set_name=set_name, other_style=other_style)
    return train, heldout


def with_system_turn(rows: Sequence[dict], system_prompt: str) -> list[dict]:
    """``rows`` with ``messages`` added (module docstring): ``system_prompt``, then the row as a conversation."""
    return [{**row, "messages": [system_turn(system_prompt), *alpaca_messages(row)]} for row in rows]


def heldout_split_size(config: StudyConfig) -> int:
    """Rows of the held-out split: the first ``heldout_size`` are scored teacher-forced; the greedy
    answers take the first ``heldout_generate`` rows of the wanted styles, so the split holds
    ``4 * heldout_generate`` rows at least (either style is drawn about half the time)."""
    return max(config.heldout_size, 4 * config.heldout_generate)


def prepare_data(config: StudyConfig, paths: StudyPaths) -> None:
    """Write ``paths.train_data`` and ``paths.heldout_data`` once (deterministic from the config)."""
    if paths.train_data.is_file() and paths.heldout_data.is_file():
        return
    train, heldout = make_splits(
        config.train_size,
        heldout_split_size(config),
        config.data_seed,
        config.program_share,
        config.problem_set,
        config.solution_style,
    )
    if config.system_prompt is not None:
        train, heldout = with_system_turn(train, config.system_prompt), with_system_turn(heldout, config.system_prompt)
    write_jsonl(paths.train_data, train)
    write_jsonl(paths.heldout_data, heldout)
    print(f"[study] data: {len(train)} training and {len(heldout)} held-out problems in {paths.data}", flush=True)


@dataclass(frozen=True)
class HeldOutRows:
    """The held-out rows every model of a study is scored on."""

    forced: list[dict]  # scored teacher-forced: the first heldout_size rows
    greedy: list[dict]  # answered greedily: :func:`generation_rows`


def heldout_rows(config: StudyConfig, heldout_path: Path) -> HeldOutRows:
    """The :class:`HeldOutRows` of the split at ``heldout_path``."""
    return HeldOutRows(read_jsonl(heldout_path)[: config.heldout_size], generation_rows(config, heldout_path))


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
