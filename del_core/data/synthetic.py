"""The project's one generator of seeded arithmetic word problems with exact answers.

Ten problem families (total cost, remaining, sum of counts, share, eggs left, percent of, average,
product, decimal sum, meters to centimeters) each draw their numbers from a ``random.Random`` and
return a :class:`Problem`: the question, worked steps ("expression = value" lines), an equivalent
Python program ending in a print of the answer, and the answer as a ``decimal.Decimal`` (exact: no
binary floating-point artefacts). Two problem sets use them:

  :data:`TRAINING_SET`  five families, 6 items and 8 names; computed decimals are written as the
                        Decimal arithmetic leaves them ("12 * 2.35 = 28.20", answer "28.20"). This is
                        ``data=synthetic:N`` (:func:`make_problems`): the README's numbers were
                        measured on it, so its rows must not change for a given seed.
  :data:`STUDY_SET`     all ten families, 8 items and 10 names, values written without trailing zeros
                        ("28.2"); the study's rows (:mod:`del_core.experiments.study.data`).
  :data:`BASIC_SET`     six one-step families within reach of a 135M model (two-digit sums and
                        differences, doubling, small costs, counts left, meters to centimeters with
                        one decimal); ``data=synthetic:basic:N``, the main job's task.

:data:`PROBLEM_SETS` names the sets a data spec can ask for (``synthetic:SET:N``).

The family order, the word lists and the order of the draws inside each family are part of what a
seed means: reordering any of them changes every row after the first affected draw.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass
from decimal import Decimal

ITEMS = ("apples", "notebooks", "tickets", "bottles of juice", "pencils", "bags of rice", "candles", "mugs")
NAMES = ("Ava", "Ben", "Chloe", "Dev", "Mia", "Omar", "Lena", "Tariq", "Sofia", "Kenji")


@dataclass(frozen=True)
class Problem:
    """The project's one generated problem: the question, its exact answer, and optionally its worked
    steps, an equivalent program and the name of the family that drew it. The word problems here
    fill every field; the numeric benchmark's problems (:mod:`del_core.experiments.numeric_bench.tasks`) are a bare
    ``question`` ("482+37=") with its ``answer`` and ``family``. Write the answer as text with
    :func:`answer_text` (the training set writes computed decimals its own way: :data:`TRAINING_SET`)."""

    question: str
    answer: Decimal
    steps: tuple[str, ...] = ()  # "expression = value" lines
    program: tuple[str, ...] = ()  # Python lines ending in a print of the answer
    family: str = ""


@dataclass(frozen=True)
class Wording:
    """What a family's text is made of: the nouns it draws from and how computed values are written."""

    items: tuple[str, ...]
    names: tuple[str, ...]
    number: Callable[[Decimal], str]  # a computed value in a question or a step


Family = Callable[[random.Random, Wording], Problem]


def answer_text(value: Decimal) -> str:
    """The project's one way to write an exact answer: no exponent, no trailing zeros, and zero
    unsigned ("28.20" -> "28.2", "36.00" -> "36", "3.5E+3" -> "3500", "0.50" -> "0.5", "-1.50" ->
    "-1.5", "-0.00" -> "0"). A signed zero is an artefact of decimal arithmetic, not a value: its
    minus sign would be a token to learn and a number reader would read it as 0 anyway."""
    return "0" if value.is_zero() else format(value.normalize(), "f")


def _training_answer_text(value: Decimal) -> str:
    """The training set's final answer: integers without a point ("3335.0" -> "3335"), other values
    as computed ("28.20" stays)."""
    return answer_text(value) if value == value.to_integral() else str(value)


def _places(value: Decimal) -> int:
    """Digits after the point of ``value`` as written by :func:`answer_text`."""
    text = answer_text(value)
    return len(text.split(".")[1]) if "." in text else 0


def _print_line(name: str, value: Decimal) -> str:
    """A print of float variable ``name`` that shows exactly ``value`` (rounded to its places)."""
    places = _places(value)
    return f"print(round({name}))" if places == 0 else f"print(round({name}, {places}))"


def _money(rng: random.Random, low: int = 105, high: int = 9999) -> Decimal:
    """An amount in dollars with cents, between ``low`` and ``high`` cents."""
    return Decimal(rng.randint(low, high)) / 100


def _total_cost(rng: random.Random, words: Wording) -> Problem:
    n, price, item, name = rng.randint(2, 48), _money(rng), rng.choice(words.items), rng.choice(words.names)
    total = n * price
    return Problem(
        f"{name} buys {n} {item} at ${price} each. How much does {name} pay in total?",
        total,
        steps=(f"{n} * {price} = {words.number(total)}",),
        program=(f"count = {n}", f"price = {price}", "total = count * price", _print_line("total", total)),
    )


def _remaining(rng: random.Random, words: Wording) -> Problem:
    start = Decimal(rng.randint(1000, 99999)) / 10
    used = Decimal(rng.randint(10, int(start * 10) - 1)) / 10
    left = start - used
    return Problem(
        f"A tank holds {start} liters of water. {used} liters are used. How many liters are left?",
        left,
        steps=(f"{start} - {used} = {words.number(left)}",),
        program=(f"capacity = {start}", f"used = {used}", "left = capacity - used", _print_line("left", left)),
    )


def _sum_of_counts(rng: random.Random, words: Wording) -> Problem:
    a, b, c = (rng.randint(10, 9999) for _ in range(3))
    return Problem(
        f"A library lends {a} books in May, {b} in June and {c} in July. How many books in all?",
        Decimal(a + b + c),
        steps=(f"{a} + {b} + {c} = {a + b + c}",),
        program=(f"may = {a}", f"june = {b}", f"july = {c}", "print(may + june + july)"),
    )


def _share(rng: random.Random, words: Wording) -> Problem:
    people = rng.choice((2, 4, 5, 8))
    each = _money(rng, 100, 99999)
    total = each * people
    bill = words.number(total)
    return Problem(
        f"{people} friends share a bill of ${bill} equally. How much does each friend pay?",
        each,
        steps=(f"{bill} / {people} = {words.number(each)}",),
        program=(f"bill = {bill}", f"friends = {people}", "each = bill / friends", _print_line("each", each)),
    )


def _eggs_left(rng: random.Random, words: Wording) -> Problem:
    boxes, per_box = rng.randint(3, 60), rng.choice((6, 10, 12, 18, 24))
    sold = rng.randint(1, boxes * per_box - 1)
    total = boxes * per_box
    name = rng.choice(words.names)
    return Problem(
        f"{name} has {boxes} boxes with {per_box} eggs each and sells {sold} eggs. How many eggs are left?",
        Decimal(total - sold),
        steps=(f"{boxes} * {per_box} = {total}", f"{total} - {sold} = {total - sold}"),
        program=(f"boxes = {boxes}", f"per_box = {per_box}", f"sold = {sold}", "print(boxes * per_box - sold)"),
    )


def _percent_of(rng: random.Random, words: Wording) -> Problem:
    percent, base = rng.choice((5, 10, 12, 15, 20, 25, 30, 40, 75)), rng.randint(20, 2000)
    value = Decimal(base) * percent / 100
    return Problem(
        f"What is {percent}% of {base}?",
        value,
        steps=(f"{base} * {percent} / 100 = {words.number(value)}",),
        program=(f"base = {base}", f"percent = {percent}", "value = base * percent / 100", _print_line("value", value)),
    )


def _average(rng: random.Random, words: Wording) -> Problem:
    values = [rng.randint(10, 999) for _ in range(4)]
    total = sum(values)
    mean = Decimal(total) / 4
    listed = ", ".join(str(v) for v in values[:-1]) + f" and {values[-1]}"
    return Problem(
        f"A shop sells {listed} items on four days. What is the average number of items per day?",
        mean,
        steps=(f"{' + '.join(map(str, values))} = {total}", f"{total} / 4 = {words.number(mean)}"),
        program=(
            f"sales = [{', '.join(map(str, values))}]",
            "mean = sum(sales) / len(sales)",
            _print_line("mean", mean),
        ),
    )


def _product(rng: random.Random, words: Wording) -> Problem:
    a, b = rng.randint(12, 999), rng.randint(3, 99)
    return Problem(
        f"What is {a} times {b}?", Decimal(a * b), steps=(f"{a} * {b} = {a * b}",), program=(f"print({a} * {b})",)
    )


def _decimal_sum(rng: random.Random, words: Wording) -> Problem:
    a, b = Decimal(rng.randint(100, 99999)) / 100, Decimal(rng.randint(10, 9999)) / 10
    total = a + b
    return Problem(
        f"Calculate {a} + {b}.",
        total,
        steps=(f"{a} + {b} = {words.number(total)}",),
        program=(f"total = {a} + {b}", _print_line("total", total)),
    )


def _in_centimeters(meters: Decimal, question: str, words: Wording) -> Problem:
    """``question`` about ``meters`` meters, answered in centimeters (x 100)."""
    cm = meters * 100
    return Problem(
        question,
        cm,
        steps=(f"{meters} * 100 = {words.number(cm)}",),
        program=(f"meters = {meters}", "centimeters = meters * 100", _print_line("centimeters", cm)),
    )


def _meters_to_cm(rng: random.Random, words: Wording) -> Problem:
    meters = Decimal(rng.randint(101, 99999)) / 100
    return _in_centimeters(meters, f"A rope is {meters} meters long. How long is it in centimeters?", words)


def _two_digit_sum(rng: random.Random, words: Wording) -> Problem:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return Problem(
        f"What is {a} plus {b}?", Decimal(a + b), steps=(f"{a} + {b} = {a + b}",), program=(f"print({a} + {b})",)
    )


def _two_digit_difference(rng: random.Random, words: Wording) -> Problem:
    a = rng.randint(20, 99)
    b = rng.randint(10, a - 1)
    return Problem(
        f"What is {a} minus {b}?", Decimal(a - b), steps=(f"{a} - {b} = {a - b}",), program=(f"print({a} - {b})",)
    )


def _double(rng: random.Random, words: Wording) -> Problem:
    x = rng.randint(10, 499)
    return Problem(f"What is double {x}?", Decimal(2 * x), steps=(f"2 * {x} = {2 * x}",), program=(f"print(2 * {x})",))


def _small_cost(rng: random.Random, words: Wording) -> Problem:
    n, price, item, name = rng.randint(2, 9), rng.randint(2, 20), rng.choice(words.items), rng.choice(words.names)
    return Problem(
        f"{name} buys {n} {item} at ${price} each. How much does {name} pay in total?",
        Decimal(n * price),
        steps=(f"{n} * {price} = {n * price}",),
        program=(f"count = {n}", f"price = {price}", "print(count * price)"),
    )


def _count_left(rng: random.Random, words: Wording) -> Problem:
    have, given, item, name = rng.randint(20, 99), rng.randint(2, 19), rng.choice(words.items), rng.choice(words.names)
    return Problem(
        f"{name} has {have} {item} and gives away {given}. How many {item} are left?",
        Decimal(have - given),
        steps=(f"{have} - {given} = {have - given}",),
        program=(f"have = {have}", f"given = {given}", "print(have - given)"),
    )


def _short_meters_to_cm(rng: random.Random, words: Wording) -> Problem:
    meters = Decimal(rng.randint(11, 999)) / 10
    return _in_centimeters(meters, f"How many centimeters are in {meters} meters?", words)


@dataclass(frozen=True)
class ProblemSet:
    """Families drawn uniformly (in this order), the wording of their text, and how the final answer
    ("The answer is X.") is written."""

    families: tuple[Family, ...]
    wording: Wording
    answer: Callable[[Decimal], str]

    def draw(self, rng: random.Random) -> tuple[str, Problem]:
        """(family name, problem): one family drawn, then its numbers, from ``rng``."""
        family = rng.choice(self.families)
        name = family.__name__.lstrip("_")
        return name, dataclasses.replace(family(rng, self.wording), family=name)


TRAINING_SET = ProblemSet(
    families=(_total_cost, _remaining, _sum_of_counts, _share, _product),
    wording=Wording(items=ITEMS[:6], names=NAMES[:8], number=str),
    answer=_training_answer_text,
)
STUDY_SET = ProblemSet(
    families=(
        _total_cost,
        _remaining,
        _sum_of_counts,
        _share,
        _eggs_left,
        _percent_of,
        _average,
        _product,
        _decimal_sum,
        _meters_to_cm,
    ),
    wording=Wording(items=ITEMS, names=NAMES, number=answer_text),
    answer=answer_text,
)


BASIC_SET = ProblemSet(
    families=(_two_digit_sum, _two_digit_difference, _double, _small_cost, _count_left, _short_meters_to_cm),
    wording=Wording(items=ITEMS, names=NAMES, number=answer_text),
    answer=answer_text,
)
PROBLEM_SETS = {"training": TRAINING_SET, "study": STUDY_SET, "basic": BASIC_SET}


def problem_set(name: str) -> ProblemSet:
    """The problem set called ``name`` in :data:`PROBLEM_SETS`; ValueError naming the choices."""
    if name not in PROBLEM_SETS:
        raise ValueError(f"unknown problem set {name!r}; choose from {', '.join(PROBLEM_SETS)}")
    return PROBLEM_SETS[name]


def make_problems(
    count: int, seed: int = 0, set_name: str = "training", exclude: Collection[str] = (), distinct: bool = False
) -> list[dict[str, str]]:
    """``count`` rows of the problem set ``set_name``, the same for the same arguments.

    Questions may repeat unless ``distinct``; a question in ``exclude`` is never taken (drawn and
    skipped, so the rows of a seed without excluded questions are those without ``exclude``).
    Each row: ``instruction`` (the question), ``input`` (empty), ``output`` (the worked steps, then
    "The answer is X.") and ``answer`` (X, the exact answer as text). ValueError when the set has
    too few questions left to draw ``count``."""
    chosen = problem_set(set_name)
    rng = random.Random(seed)
    skipped, rows = set(exclude), []
    for _ in range(100 * count + 1000):
        if len(rows) == count:
            return rows
        _, problem = chosen.draw(rng)
        if problem.question in skipped:
            continue
        if distinct:
            skipped.add(problem.question)
        answer = chosen.answer(problem.answer)
        rows.append(
            {
                "instruction": problem.question,
                "input": "",
                "output": "\n".join(problem.steps) + f"\nThe answer is {answer}.",
                "answer": answer,
            }
        )
    if len(rows) == count:
        return rows
    raise ValueError(f"problem set {set_name!r}: could not draw {count} rows with seed {seed} ({len(rows)} drawn)")
