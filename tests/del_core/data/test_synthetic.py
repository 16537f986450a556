"""del_core.data.synthetic: the training problems (``data=synthetic:N``) are exact, seeded, and the
very rows they were before the study's generators were merged into this module."""

from __future__ import annotations

from decimal import Decimal

from del_core.data.synthetic import make_problems

# make_problems(12, seed=3)[0] and [4], computed with recipes/synthetic_math.py before the merge. Row 4
# keeps the training set's writing of a computed decimal ("3335.0" in the step, "3335" as the answer).
ROW_0 = {
    "instruction": "A tank holds 7867.8 liters of water. 7134.3 liters are used. How many liters are left?",
    "input": "",
    "output": "7867.8 - 7134.3 = 733.5\nThe answer is 733.5.",
    "answer": "733.5",
}
ROW_4 = {
    "instruction": "A tank holds 9499.8 liters of water. 6164.8 liters are used. How many liters are left?",
    "input": "",
    "output": "9499.8 - 6164.8 = 3335.0\nThe answer is 3335.",
    "answer": "3335",
}
ROW_3 = {"instruction": "Dev buys 32 pencils at $43.54 each. How much does Dev pay in total?", "input": "",
         "output": "32 * 43.54 = 1393.28\nThe answer is 1393.28.", "answer": "1393.28"}  # fmt: skip


def test_training_problems_are_the_rows_of_before_the_merge():
    rows = make_problems(12, seed=3)
    assert (rows[0], rows[3], rows[4]) == (ROW_0, ROW_3, ROW_4)
    assert make_problems(1, seed=0)[0]["output"] == "432.48 / 8 = 54.06\nThe answer is 54.06."


def test_synthetic_problems_are_exact_and_seeded():
    rows = make_problems(50, seed=7)
    assert rows == make_problems(50, seed=7) and rows != make_problems(50, seed=8)
    for row in rows:
        step, final = row["output"].split("\n")
        assert final == f"The answer is {row['answer']}."
        lhs, rhs = step.split(" = ")
        op = lhs.split(" ")[1]
        terms = [Decimal(t) for t in lhs.split(" ")[::2]]
        expected = {"+": sum(terms), "-": terms[0] - terms[1], "*": terms[0] * terms[1], "/": terms[0] / terms[1]}[op]
        assert Decimal(rhs) == expected and Decimal(row["answer"]) == expected
