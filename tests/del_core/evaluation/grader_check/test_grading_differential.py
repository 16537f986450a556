"""The hedge rule, the number forms of docs/number_forms.md (exact values), and a CI-sized run of the
differential grading tool (recipes/grade_corpus.py): <= 2% disagreement with the construction labels
on the held-out forms of every benchmark, and no hedge scored right."""

from __future__ import annotations

from fractions import Fraction

import pytest

from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.math_equivalence import inequality_as_interval, math_equivalent
from del_core.evaluation.answers.numbers import (
    find_numbers,
    number_from_words,
    numbers_match,
    parse_number,
    repeating_value,
)
from del_core.evaluation.answers.program_output import answer_from_program_output
from del_core.evaluation.answers.scoring import is_correct
from del_core.evaluation.grader_check.corpus import FORMS
from del_core.evaluation.grader_check.differential import agreement_table, run_corpus
from del_core.evaluation.grader_check.held_out_forms import HELD_OUT_FORMS
from del_core.evaluation.question import BENCHMARKS, Record

CHOICE = Record("aqua", 0, "q", "C", "choice", ("12", "15", "18", "20", "None of these"))
NUMBER = Record("gsm8k", 0, "q", "18", "number")
MATH = Record("math", 0, "q", "\\frac{3}{4}", "math")
SIMULEQ = Record("simuleq", 0, "How many x? How many y?", ["4"], "numbers")


@pytest.mark.parametrize(
    "output, record",
    [
        ("The answer is A or C.", CHOICE),
        ("The answer is (A) or (C).", CHOICE),
        ("The answer is C or maybe A.", CHOICE),
        ("The answer is either (C) or (D).", CHOICE),
        ("The answer is C and/or D.", CHOICE),
        ("\\boxed{C} \\boxed{A}", CHOICE),
        ("\\boxed{A}\nOn second thought \\boxed{C}", CHOICE),
        ("$\\boxed{20}$ or maybe $\\boxed{18}$", NUMBER),
        ("The answer is 18 or 20.", NUMBER),
        ("The answer is 20 and/or 18.", NUMBER),
        ("\\boxed{17} \\boxed{18}", NUMBER),
        ("The answer is $\\frac{3}{4}$ or $\\frac{1}{2}$.", MATH),
        ("\\boxed{\\frac12} \\boxed{\\frac34}", MATH),
        ("$\\boxed{5}$ or $\\boxed{4}$", SIMULEQ),
        ("The answer is 18 (or possibly 19).", NUMBER),
        ("The answer is between 18 and 19.", NUMBER),
        ("The answer is between $\\frac34$ and $1$.", MATH),
        ("The answer is (C), or possibly (D).", CHOICE),
        ("The answer is between (C) and (D).", CHOICE),
        ("The answer is 4 (or possibly 5).", SIMULEQ),
        ("We add them.\nIt could be 19, or it could be 18.", NUMBER),
        ("We add them.\nIt could be $\\frac12$, or it could be $\\frac34$.", MATH),
        ("The answer is 18-20.", NUMBER),
        ("The answer is 4\u20136.", SIMULEQ),
        ("The answer is $\\frac12$ to $\\frac34$.", MATH),
    ],
)
def test_a_hedge_is_no_answer(output, record):
    assert answer_from_text(output, record.kind, record.choices, record.question) is None


@pytest.mark.parametrize(
    "output, record, expected",
    [
        ("Options: (A) 12 (B) 15 (C) 18. (A) and (B) are too small.\nThe answer is (C).", CHOICE, "C"),
        ("A is wrong, B is not possible either.\nThe answer is C.", CHOICE, "C"),
        ("Answer: The correct option is C", CHOICE, "C"),
        ("\\boxed{C} and again \\boxed{C}", CHOICE, "C"),
        ("Solving: so \\boxed{4} and \\boxed{6}.", SIMULEQ, ["4", "6"]),
        ("The answer is C, and D is wrong.", CHOICE, "C"),
        ("The answer is 18, or 1800% of 1.", NUMBER, "18"),
        ("The answer is 50%, or 0.5 of the total.", NUMBER, "50"),
        ("The answer is $x = 2$ or $x = -3$.", MATH, "2, -3"),
        ("The answer is 20-2 = 18.", NUMBER, "18"),
        ("We need the difference between 79 and 28, which is 51.", NUMBER, "51"),
        ("The answer is $x^2-4$.", MATH, "x^2-4"),
        ("\\boxed{x = 2 \\text{ or } x = 3}", MATH, "2, 3"),
    ],
)
def test_echoes_and_eliminations_are_no_hedge(output, record, expected):
    assert answer_from_text(output, record.kind, record.choices, record.question) == expected


@pytest.mark.parametrize(
    "written, value",
    [
        ("1{,}450{,}000", 1450000),
        ("1\\,450\\,000", 1450000),
        ("1\u2009450\u2009000", 1450000),
        ("1,450,000", 1450000),
        ("1.45 million", 1450000),
        ("3 thousand", 3000),
        ("2 billion", 2000000000),
        ("$1,600", 1600),
        ("-12", -12),
        ("3.50", Fraction(7, 2)),
        ("583 1/3", Fraction(1750, 3)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("12%", 12),
        ("1\\ 450", 1450),
        ("1~450", 1450),
        ("1 trillion", 10**12),
        ("1e-05", Fraction(1, 100000)),
        ("\u221218", -18),
        (".5", Fraction(1, 2)),
    ],
)
def test_number_forms_parse_to_exact_values(written, value):
    assert parse_number(written) == value
    assert [parse_number(n) for n in find_numbers(f"so it is {written} in all")] == [value]


def test_plain_spaces_join_digit_groups_only_in_an_answer_statement():
    assert answer_from_text("Answer: 1 450 000", "number") == "1,450,000"
    assert answer_from_text("The answer is 118 000 dollars.", "number") == "118,000"
    assert find_numbers("4 6 14 15") == ["4", "6", "14", "15"]
    assert find_numbers("99 101") == ["99", "101"]
    assert answer_from_program_output("4 6\n", "numbers") == ["4", "6"]


@pytest.mark.parametrize(
    "stdout, kind, gold, expected",
    [
        ("9*pi\n", "math", "9\\pi", True),
        ("sqrt(2)/2\n", "math", "\\frac{\\sqrt{2}}{2}", True),
        ("Interval.Lopen(2, 5)\n", "math", "(2,5]", True),
        ("answer: 3/4\n", "math", "\\frac34", True),
        ("18\nThat is the answer.\n", "number", "18", True),
        ("3/4\nDone.\n", "math", "\\frac34", True),
        ("{x: 4, y: 6}\n", "numbers", ["4"], True),
        ("3 + 5*I\n", "math", "3+5i", True),
        ("Union(Interval.open(-oo, -4), Interval.open(6, oo))\n", "math", "(-\\infty,-4)\\cup(6,\\infty)", True),
        ("Eq(x, 3)\n", "math", "3", True),
        ("[18]\n", "number", "18", True),
        ("(18,)\n", "number", "18", True),
        ("[-3,2]\n", "math", "[-3,2]", True),
    ],
)
def test_program_output_forms(stdout, kind, gold, expected):
    record = Record("t", 0, "q", gold, kind)
    assert is_correct(answer_from_program_output(stdout, kind), record) is expected


@pytest.mark.parametrize(
    "inequality, interval",
    [
        ("2 < x \\le 5", "(2,5]"),
        ("x \\ge 0", "[0,\\infty)"),
        ("x < 0", "(-\\infty,0)"),
        ("x<-8 \\text{ or } x>8", "(-\\infty,-8)\\cup(8,\\infty)"),
    ],
)
def test_inequalities_answer_intervals(inequality, interval):
    assert inequality_as_interval(inequality) == interval
    assert math_equivalent(inequality, interval)
    assert not math_equivalent("2 \\le x \\le 5", "(2,5]")


@pytest.mark.parametrize(
    "output, record, expected",
    [
        ("The answer is eighteen.", NUMBER, True),
        ("The answer is twenty.", NUMBER, False),
        ("The answer is four.", SIMULEQ, True),
        ("The answer is $\\textbf{(C)}$.", CHOICE, True),
        ("The answer is $\\$18$.", Record("math", 0, "q", "18", "math"), True),
        ("The answer is \u221218.", Record("gsm8k", 0, "q", "-18", "number"), True),
        ("The answer is \u22124.", Record("simuleq", 0, "q", ["-4"], "numbers"), True),
        ("We add 9 and 18.\nThere is not enough information to determine the answer.", NUMBER, False),
        ("The answer is 18.\nWait, I made an error. The answer is 19.", NUMBER, False),
    ],
)
def test_answer_forms(output, record, expected):
    answer = answer_from_text(output, record.kind, record.choices, record.question)
    assert is_correct(answer, record) is expected


@pytest.mark.parametrize(
    "words, value",
    [("eighteen", 18), ("twenty-five", 25), ("one hundred and five", 105), ("three thousand", 3000)]
    + [("so it is zero", 0), ("none of them", None)],
)
def test_number_from_words(words, value):
    assert number_from_words(words) == value


@pytest.mark.parametrize(
    "output, question, expected",
    [
        ("The answer is 45 cents.", "A pen costs $0.45 and ... How much does it cost?", "0.45"),
        ("The answer is $0.45.", "How many cents does it cost?", "45"),
        ("The answer is 0.45 dollars.", "What is the cost, in cents?", "45"),
        ("The answer is 45.", "A pen costs $0.45. How much?", "45"),
    ],
)
def test_amounts_in_the_currency_unit_asked_for(output, question, expected):
    assert answer_from_text(output, "number", (), question) == expected


def test_an_option_text_starting_with_a_is_no_letter():
    record = Record("sat", 0, "q", "B", "choice", ("A charge per mile of $0.50", "A fixed fee of $19.99"))
    assert answer_from_text("The answer is A fixed fee of $19.99", "choice", record.choices) == "B"
    assert answer_from_text("The answer is A charge per mile of $0.50", "choice", record.choices) == "A"
    assert answer_from_text("The answer is A, since the fee is fixed.", "choice", record.choices) == "A"


def test_a_printed_list_of_one_letter():
    assert answer_from_program_output("['C']\n", "choice", CHOICE.choices) == "C"
    assert answer_from_program_output("working\nB.\n", "choice", CHOICE.choices) == "B"  # a letter, not a label


def test_answer_first_then_its_working():
    output = "She sells 9 eggs.\nShe makes $18 every day (she sells 9 eggs at $2 each)."
    assert answer_from_text(output, "number") == "18"


@pytest.mark.parametrize(
    "gold, places, value",
    [("0.6667", 4, Fraction(2, 3)), ("583.3333", 4, Fraction(1750, 3)), ("83.33", 2, Fraction(250, 3))]
    + [("6.11", 2, Fraction(55, 9)), ("0.45", 2, None), ("9.99", 2, None), ("0.3", 1, None), ("1.375", 3, None)],
)
def test_repeating_value_of_a_rounded_gold(gold, places, value):
    assert repeating_value(Fraction(gold), places) == value


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [("583.33", "583.3333", True), ("583.3", "583.3333", False), ("0.67", "0.6667", True)]
    + [("83.333", "83.33", True), ("0.455", "0.45", False), ("0.25", "0.3", False), ("-12", "-12", True)],
)
def test_decimal_rule(prediction, gold, expected):
    assert numbers_match(prediction, gold) is expected


def test_corpus_has_a_third_of_the_forms_held_out():
    assert len(FORMS) >= 15 and len(HELD_OUT_FORMS) * 3 >= len(FORMS)


def test_differential_grading_small_corpus(data_dir):
    """CI-sized: 12 records per benchmark x 21 forms, graded by the project and the two fast graders."""
    graded = run_corpus(data_dir, BENCHMARKS, problems=12, graders=("mammoth", "strict"))
    rows = agreement_table(graded)
    assert {row.benchmark for row in rows} == set(BENCHMARKS)
    for row in rows:
        assert row.hedges > 0 and row.hedges_scored_right == 0, row
        if row.split == "held-out":
            assert row.project_vs_label <= 0.02 * row.n, row


def _recipe():
    import importlib.util

    from helpers.shared import REPO

    spec = importlib.util.spec_from_file_location("grade_corpus", REPO / "recipes" / "grade_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_writes_the_report(data_dir, tmp_path, capsys):
    out = tmp_path / "report.md"
    argv = [f"data_dir={data_dir}", "benchmarks=gsm8k", "problems=3", "graders=strict"]
    assert _recipe().main(argv + [f"out={out}"]) == 0
    text = out.read_text()
    assert "| gsm8k | development | 63 | 0 (0.0%) | 0/12 |" in text
    assert "| gsm8k | held-out | 57 | 0 (0.0%) | 0/12 |" in text
    assert "### project vs strict" in text
    assert _recipe().main(argv[:3] + ["graders=nope"]) == 2
    assert "unknown grader(s) ['nope']" in capsys.readouterr().err
