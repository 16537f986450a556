"""The study's own training data: seeded math word problems and calculations with integer and decimal
answers, each solved either in worked steps or by a short Python program.

A row is MathInstruct-style: ``instruction`` (the question; program-style rows end with
" Let's write a program.", the program-of-thought cue of ``recipes/evaluation/prompts.py``),
``input`` (empty), ``output`` (the solution, always ending "The answer is X."), plus ``answer``
(the exact answer as text), ``family`` (which generator) and ``style`` (steps | program).

    steps:    "12 * 2.35 = 28.2\\nThe answer is 28.2."
    program:  "```python\\ncount = 12\\nprice = 2.35\\ntotal = count * price\\nprint(round(total, 2))\\n```\\n
               The answer is 28.2."

Arithmetic is exact (``decimal.Decimal``); every program prints the answer (tests run them).
:func:`make_splits` gives a training split and a held-out split drawn from the same generator
with another seed, with no held-out question that also occurs in the training split.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Callable, Sequence

from recipes.evaluation.prompts import PROGRAM_SUFFIX

ITEMS = ("apples", "notebooks", "tickets", "bottles of juice", "pencils", "bags of rice", "candles", "mugs")
NAMES = ("Ava", "Ben", "Chloe", "Dev", "Mia", "Omar", "Lena", "Tariq", "Sofia", "Kenji")


@dataclass(frozen=True)
class Problem:
    """One generated problem: the question, its worked steps, an equivalent program, the answer."""

    question: str
    steps: tuple[str, ...]  # "expression = value" lines
    program: tuple[str, ...]  # Python lines ending in a print of the answer
    answer: Decimal


def answer_text(value: Decimal) -> str:
    """The answer as written: no exponent, no trailing zeros ("28.20" -> "28.2", "36.00" -> "36")."""
    text = format(value.normalize(), "f")
    return text


def _places(value: Decimal) -> int:
    """Digits after the point of ``value`` as written by :func:`answer_text`."""
    text = answer_text(value)
    return len(text.split(".")[1]) if "." in text else 0


def _print_line(name: str, value: Decimal) -> str:
    """A print of float variable ``name`` that shows exactly ``value`` (rounded to its places)."""
    places = _places(value)
    return f"print(round({name}))" if places == 0 else f"print(round({name}, {places}))"


def _money(rng: random.Random, low: int = 105, high: int = 9999) -> Decimal:
    return Decimal(rng.randint(low, high)) / 100


def _total_cost(rng: random.Random) -> Problem:
    n, price, item, name = rng.randint(2, 48), _money(rng), rng.choice(ITEMS), rng.choice(NAMES)
    total = n * price
    return Problem(f"{name} buys {n} {item} at ${price} each. How much does {name} pay in total?",
                   (f"{n} * {price} = {answer_text(total)}",),
                   (f"count = {n}", f"price = {price}", "total = count * price", _print_line("total", total)), total)


def _remaining(rng: random.Random) -> Problem:
    start = Decimal(rng.randint(1000, 99999)) / 10
    used = Decimal(rng.randint(10, int(start * 10) - 1)) / 10
    left = start - used
    return Problem(f"A tank holds {start} liters of water. {used} liters are used. How many liters are left?",
                   (f"{start} - {used} = {answer_text(left)}",),
                   (f"capacity = {start}", f"used = {used}", "left = capacity - used", _print_line("left", left)), left)


def _sum_of_counts(rng: random.Random) -> Problem:
    a, b, c = (rng.randint(10, 9999) for _ in range(3))
    return Problem(f"A library lends {a} books in May, {b} in June and {c} in July. How many books in all?",
                   (f"{a} + {b} + {c} = {a + b + c}",),
                   (f"may = {a}", f"june = {b}", f"july = {c}", "print(may + june + july)"), Decimal(a + b + c))


def _share(rng: random.Random) -> Problem:
    people = rng.choice((2, 4, 5, 8))
    each = _money(rng, 100, 99999)
    total = each * people
    return Problem(f"{people} friends share a bill of ${answer_text(total)} equally. How much does each friend pay?",
                   (f"{answer_text(total)} / {people} = {answer_text(each)}",),
                   (f"bill = {answer_text(total)}", f"friends = {people}", "each = bill / friends",
                    _print_line("each", each)), each)


def _eggs_left(rng: random.Random) -> Problem:
    boxes, per_box = rng.randint(3, 60), rng.choice((6, 10, 12, 18, 24))
    sold = rng.randint(1, boxes * per_box - 1)
    total = boxes * per_box
    name = rng.choice(NAMES)
    return Problem(f"{name} has {boxes} boxes with {per_box} eggs each and sells {sold} eggs. How many eggs are left?",
                   (f"{boxes} * {per_box} = {total}", f"{total} - {sold} = {total - sold}"),
                   (f"boxes = {boxes}", f"per_box = {per_box}", f"sold = {sold}", "print(boxes * per_box - sold)"),
                   Decimal(total - sold))


def _percent_of(rng: random.Random) -> Problem:
    percent, base = rng.choice((5, 10, 12, 15, 20, 25, 30, 40, 75)), rng.randint(20, 2000)
    value = Decimal(base) * percent / 100
    return Problem(f"What is {percent}% of {base}?",
                   (f"{base} * {percent} / 100 = {answer_text(value)}",),
                   (f"base = {base}", f"percent = {percent}", "value = base * percent / 100", _print_line("value", value)),
                   value)


def _average(rng: random.Random) -> Problem:
    values = [rng.randint(10, 999) for _ in range(4)]
    total = sum(values)
    mean = Decimal(total) / 4
    listed = ", ".join(str(v) for v in values[:-1]) + f" and {values[-1]}"
    return Problem(f"A shop sells {listed} items on four days. What is the average number of items per day?",
                   (f"{' + '.join(map(str, values))} = {total}", f"{total} / 4 = {answer_text(mean)}"),
                   (f"sales = [{', '.join(map(str, values))}]", "mean = sum(sales) / len(sales)",
                    _print_line("mean", mean)), mean)


def _product(rng: random.Random) -> Problem:
    a, b = rng.randint(12, 999), rng.randint(3, 99)
    return Problem(f"What is {a} times {b}?", (f"{a} * {b} = {a * b}",), (f"print({a} * {b})",), Decimal(a * b))


def _decimal_sum(rng: random.Random) -> Problem:
    a, b = Decimal(rng.randint(100, 99999)) / 100, Decimal(rng.randint(10, 9999)) / 10
    total = a + b
    return Problem(f"Calculate {a} + {b}.", (f"{a} + {b} = {answer_text(total)}",),
                   (f"total = {a} + {b}", _print_line("total", total)), total)


def _meters_to_cm(rng: random.Random) -> Problem:
    meters = Decimal(rng.randint(101, 99999)) / 100
    cm = meters * 100
    return Problem(f"A rope is {meters} meters long. How long is it in centimeters?",
                   (f"{meters} * 100 = {answer_text(cm)}",),
                   (f"meters = {meters}", "centimeters = meters * 100", _print_line("centimeters", cm)), cm)


GENERATORS: tuple[Callable[[random.Random], Problem], ...] = (
    _total_cost, _remaining, _sum_of_counts, _share, _eggs_left, _percent_of, _average, _product, _decimal_sum,
    _meters_to_cm,
)
STYLES = ("steps", "program")


def to_row(problem: Problem, style: str, family: str) -> dict[str, str]:
    """The training row of ``problem`` written in ``style`` (steps | program)."""
    final = f"The answer is {answer_text(problem.answer)}."
    if style == "steps":
        return {"instruction": problem.question, "input": "", "output": "\n".join(problem.steps) + "\n" + final,
                "answer": answer_text(problem.answer), "family": family, "style": style}
    if style == "program":
        code = "\n".join(problem.program)
        return {"instruction": problem.question + PROGRAM_SUFFIX, "input": "",
                "output": f"```python\n{code}\n```\n{final}", "answer": answer_text(problem.answer),
                "family": family, "style": style}
    raise ValueError(f"unknown solution style {style!r}; choose from {', '.join(STYLES)}")


def make_rows(count: int, seed: int, program_share: float = 0.5, exclude: Sequence[str] = ()) -> list[dict[str, str]]:
    """``count`` rows with distinct instructions, none in ``exclude``; the same for the same
    arguments. A share ``program_share`` of them is written as programs, the rest as steps."""
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
        generator = rng.choice(GENERATORS)
        problem = generator(rng)
        style = "program" if rng.random() < program_share else "steps"
        row = to_row(problem, style, generator.__name__.lstrip("_"))
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


def write_jsonl(path: Path, rows: Sequence[dict]) -> Path:
    """Write ``rows`` to ``path`` (one JSON object a line), atomically; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(path.suffix + ".tmp")
    staging.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    staging.replace(path)
    return path


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file written by :func:`write_jsonl`."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
