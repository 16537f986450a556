"""Answer extraction, comparison rules, metrics and benchmark loading errors of del_core/evaluation."""

import hashlib
import json
from pathlib import Path

import pytest

from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.math_equivalence import math_equivalent
from del_core.evaluation.answers.numbers import find_numbers, numbers_match
from del_core.evaluation.answers.program_output import answer_from_program_output, program_from_output
from del_core.evaluation.answers.scoring import is_correct, summarise
from del_core.evaluation.benchmarks import files as benchmark_data
from del_core.evaluation.benchmarks.files import BenchmarkError, data_dir_from, load_benchmark, parse_benchmark_list
from del_core.evaluation.question import Record

CHOICES = ("p = 4", "p = 8", "p = 12", "p = 24")


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        ("583.3333333333334", "583.3333", True),
        ("583.333333", "583.3333", True),
        ("583.33334", "583.3333", False),  # one more digit: a different value, not an expansion
        ("0.25", "0.3", False),
        ("1.75", "1.8", False),
        ("11.24", "11.2", False),
        ("18.90", "18.9", True),
        ("583.33", "583.3333", True),  # 1750/3 to 2 places: the gold rounds a repeating decimal
        ("583.333", "583.3333", True),
        ("583.34", "583.3333", False),
        ("583.3", "583.3333", False),  # one place: fewer than any gold of the files is rounded to
        ("0.67", "0.6667", True),
        ("0.45", "0.4545", True),  # 5/11
        ("0.455", "0.45", False),  # 0.45 rounds no repeating decimal (5/11 needs 4 places)
        ("28.0833", "28.08", True),
        ("28.1", "28.08", False),
        ("18", "18", True),
        ("18.0", "18", True),
        ("17.999999999999996", "18", True),
        ("17.6", "18", False),
        ("18.4", "18", False),
        ("2,125", "2125", True),
        ("$1,600", "1600", True),
        ("25%", "25", True),
        ("1/2", "0.5", True),
        ("0.3333333333333333", "1/3", True),
        ("0.3333", "1/3", False),
        ("53333.8", "266664/5", False),
        ("-4.5", "-4.5", True),
        ("4.5", "-4.5", False),
        ("abc", "18", False),
        (None, "18", False),
    ],
)
def test_numbers_match(prediction, gold, expected):
    assert numbers_match(prediction, gold) is expected


def test_find_numbers_keeps_thousands_and_splits_lists():
    assert find_numbers("It costs $1,234.50, then 15, 9 and -3/4, .5, 1e-05 or \\frac{2}{3}; x2") == [
        "1,234.50",
        "15",
        "9",
        "-3/4",
        ".5",
        "1e-05",
        "2/3",
    ]


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        ("\\frac12", "0.5", True),
        ("\\dfrac{9}{7}", "\\frac{9}{7}", True),
        ("9/7", "\\frac{9}{7}", True),
        ("\\sqrt2/2", "\\frac{\\sqrt{2}}{2}", True),
        ("2\\sqrt{3}", "\\sqrt{12}", True),
        ("x = 5", "5", True),
        ("(1,2)", "(1, 2)", True),
        ("2, 1", "1,2", True),
        ("[1,2)", "[1,2]", False),
        ("10,080", "10080", True),
        ("\\text{(C)}", "(C)", True),
        ("3+4i", "4i+3", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("5\\text{ cm}", "5", True),
        ("90^\\circ", "90", True),
        ("\\pi/2", "\\frac{\\pi}{2}", True),
        ("2^{2005}+1", "2^{2005}", False),
        ("\\begin{pmatrix}6\\\\3\\\\0\\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ 3 \\\\ 0 \\end{pmatrix}", True),
        ("\\begin{pmatrix} 6 \\\\ 0 \\\\ 3 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ 3 \\\\ 0 \\end{pmatrix}", False),
        ("\\begin{pmatrix} 6 & 3 & 0 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ 3 \\\\ 0 \\end{pmatrix}", False),
        ("\\begin{pmatrix}0.6\\\\11.4\\end{pmatrix}", "\\begin{pmatrix} 3/5 \\\\ 57/5 \\end{pmatrix}", True),
        ("(2, 1)", "(1, 2)", False),
        ("[2,5)", "[2, 5)", True),
        ("(2,5)", "[2, 5)", False),
        ("0.25", "0.3", False),
        ("\\frac \\pi4", "\\frac{\\pi}{4}", True),
        ("3", "4", False),
        ("__import__('os').getcwd()", "1", False),
        (None, "1", False),
        ("", "1", False),
    ],
)
def test_math_equivalence(prediction, gold, expected):
    assert math_equivalent(prediction, gold) is expected


@pytest.mark.parametrize(
    "output, kind, expected",
    [
        ("9 * 2 = 18. The answer is 18 dollars.", "number", "18"),
        ("She makes 16 - 3 - 4 = 9 eggs, so 9 * 2 = 18", "number", "18"),
        ("The answer is: $1,600.", "number", "$1,600"[1:]),
        ("We get \\boxed{\\frac{9}{7}}.", "math", "\\frac{9}{7}"),
        ("The answer is $\\frac{9}{7}$.", "math", "\\frac{9}{7}"),
        ("\\frac{9}{7}", "math", "\\frac{9}{7}"),
        ("The answer is 15 and 9.", "numbers", ["15", "9"]),
        ("x + y = 24 and x - y = 6, so x = 15 and y = 9.", "numbers", ["15", "9"]),
        ("Adding, 2x = 30, x = 15.\nThen y = 24 - 15 = 9, so x = 15, y = 9", "numbers", ["15", "9"]),
        ("First \\boxed{15}, then \\boxed{y = 9}.", "numbers", ["15", "9"]),
        ("There are 15 cows.\nThere are 15 cows and 9 hens.", "numbers", ["15", "9"]),
        ("The answer is: 9 * 2 = 18", "number", "18"),
        ("The answer is - 10", "number", "-10"),
        ("The answer is 18 or 20.", "number", None),
        ("The answer is 18. Check: 20 - 2 = 18.", "number", "18"),
        ("#### 18", "number", "18"),
        ("**Answer:** 18", "number", "18"),
        ("Final Answer: The final answer is $\\frac{9}{7}$. I hope it is correct.", "math", "\\frac{9}{7}"),
        ("The answer is \\frac{9}{7}. This is in lowest terms.", "math", "\\frac{9}{7}"),
        ("#### \\frac{9}{7}", "math", "\\frac{9}{7}"),
        ("no number here", "number", None),
    ],
)
def test_answer_from_text(output, kind, expected):
    assert answer_from_text(output, kind) == expected


@pytest.mark.parametrize(
    "output, expected",
    [
        ("The answer is (C).", "C"),
        ("The answer is C: p = 12", "C"),
        ("The answer is p = 12.", "C"),
        ("The answer is $\\boxed{B}$", "B"),
        ("B", "B"),
        ("(D)", "D"),
        ("so the correct option is (B) here", "B"),
        ("The answer is b.", "B"),
        ("Answer: b", "B"),
        ("The answer is b) p = 8", "B"),
        ("Option B is correct.", "B"),
        ("B is the correct answer.", "B"),
        ("(A) is too small and (D) is too big.\nSo the answer is **(C)**", "C"),
        ("(A) is too small and (D) is too big, so it must be one of the others.", None),
        ("Options: (A) p = 4 (B) p = 8 (C) p = 12 (D) p = 24", None),
        ("The answer is probably one of them. (B) looks nice.", None),
        ("I cannot decide.", None),
        ("The answer is E.", None),
        ("The answer is a number.", None),
        ("", None),
    ],
)
def test_multiple_choice_never_defaults(output, expected):
    assert answer_from_text(output, "choice", CHOICES) == expected


def test_unanswered_multiple_choice_is_wrong_and_counted():
    record = Record("sat", 0, "q", "A", "choice", ("1", "2", "3", "4"))
    answer = answer_from_text("I do not know", "choice", record.choices)
    assert answer is None and is_correct(answer, record) is False
    summary = summarise([{"benchmark": "sat", "kind": "choice", "answer": answer, "gold": "A", "correct": False}])
    assert summary["benchmarks"]["sat"] == {
        "n": 1,
        "correct": 0,
        "unanswered": 1,
        "accuracy": 0.0,
        "numeric": {"n": 0, "mae": None, "log_mae": None, "digit_acc": {}},
    }


def test_simuleq_lists_compare_in_the_gold_order():
    record = Record("simuleq", 0, "q", ["15", "9"], "numbers")
    assert is_correct(["15", "9"], record) and is_correct(["15.0", "9", "24"], record)
    assert not is_correct(["9", "15"], record) and not is_correct(["15"], record)
    assert is_correct(["15", "9"], Record("simuleq", 1, "q", ["15"], "numbers"))


def test_programs_and_their_printed_answers():
    assert program_from_output("```python\nx = 3\nprint(x * 2)\n```\nSo it is 6.") == "x = 3\nprint(x * 2)"
    assert program_from_output("a = 2\nb = a * 3") == "a = 2\nb = a * 3\nprint(b)"
    assert program_from_output("def solution():\n    return 5") == "def solution():\n    return 5\nprint(solution())"
    assert program_from_output("Sure! I will compute it.") is None
    assert answer_from_program_output("step 1\n583.3333333333334\n", "number") == "583.3333333333334"
    assert answer_from_program_output("15\n9\n", "numbers") == ["15", "9"]
    assert answer_from_program_output("x = 15, y = 9\n", "numbers") == ["15", "9"]
    assert answer_from_program_output("90\\text{ square\nunits}\n", "math") == "90\\text{ square\nunits}"
    assert answer_from_program_output("", "number") is None


def test_summary_metrics_exact():
    rows = [
        {"benchmark": "gsm8k", "kind": "number", "answer": "118", "gold": "18", "correct": False},
        {"benchmark": "gsm8k", "kind": "number", "answer": "18", "gold": "18", "correct": True},
        {
            "benchmark": "simuleq",
            "kind": "numbers",
            "answer": ["583.3333333333334"],
            "gold": ["583.3333"],
            "correct": True,
        },
        {"benchmark": "simuleq", "kind": "numbers", "answer": None, "gold": ["2.5"], "correct": False},
        {"benchmark": "aqua", "kind": "choice", "answer": "B", "gold": "B", "correct": True},
    ]
    summary = summarise(rows)
    assert [(k, v["n"], v["correct"], v["unanswered"]) for k, v in summary["benchmarks"].items()] == [
        ("gsm8k", 2, 1, 0),
        ("simuleq", 2, 1, 1),
        ("aqua", 1, 1, 0),
    ]
    assert summary["mACC"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    numeric = summary["numeric"]
    assert numeric["n"] == 3
    assert numeric["mae"] == pytest.approx((100 + 0 + 1 / 30000) / 3)  # 583.33333.. - 583.3333 = 1/30000 (float)
    assert numeric["digit_acc"] == {
        "10^2": 1.0,
        "10^1": 1.0,
        "10^0": 1.0,
        "10^-1": 1.0,
        "10^-2": 1.0,
        "10^-3": 1.0,
        "10^-4": 1.0,
    }  # 118 vs 18: tens and units agree
    assert numeric["digit_n"] == {"10^2": 1, "10^1": 3, "10^0": 3, "10^-1": 1, "10^-2": 1, "10^-3": 1, "10^-4": 1}


def test_log_mae_term():
    rows = [{"benchmark": "gsm8k", "kind": "number", "answer": "-1", "gold": "1", "correct": False}]
    import math

    assert summarise(rows)["numeric"]["log_mae"] == pytest.approx(2 * math.log(2))


def test_benchmark_errors_name_file_row_and_field(tmp_path, monkeypatch):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "gsm8k.jsonl").write_text(
        json.dumps({"question": "q", "answer": "x\n#### 7"})
        + "\n"
        + json.dumps({"question": "q", "answer": "no mark"})
        + "\n"
    )
    with pytest.raises(BenchmarkError, match=r"gsm8k\.jsonl row 1: field 'answer' has no '#### <number>' line"):
        load_benchmark("gsm8k", tmp_path)
    assert load_benchmark("gsm8k", tmp_path, limit=1)[0].gold == "7"
    (tmp_path / "mmlu_mathematics").mkdir()
    (tmp_path / "mmlu_mathematics" / "mathematics.json").write_text(
        json.dumps([{"question": "q", "choices": ["a"], "answer": 3}])
    )
    with pytest.raises(
        BenchmarkError, match=r"mathematics\.json row 0: field 'answer' is 3, not an index into 1 choices"
    ):
        load_benchmark("mmlu_mathematics", tmp_path)
    with pytest.raises(BenchmarkError, match=r"benchmark file not found: .*svamp/SVAMP\.json"):
        load_benchmark("svamp", tmp_path)
    assert parse_benchmark_list("gsm8k, svamp") == ("gsm8k", "svamp")
    with pytest.raises(BenchmarkError, match="unknown benchmark"):
        parse_benchmark_list("gsm8k,mmlu")


REPOSITORY = Path(__file__).resolve().parents[4]


def test_the_benchmark_directory_is_the_flag_else_the_environment_else_the_repository_copy(tmp_path, monkeypatch):
    monkeypatch.delenv("DEL_BENCHMARK_DIR", raising=False)
    assert data_dir_from(None) == REPOSITORY / "data" / "benchmarks"
    monkeypatch.setenv("DEL_BENCHMARK_DIR", str(tmp_path / "env"))
    with pytest.raises(BenchmarkError, match=f"benchmark directory not found: {tmp_path}/env$"):
        data_dir_from(None)
    (tmp_path / "env").mkdir()
    assert data_dir_from(None) == tmp_path / "env"
    assert data_dir_from(str(tmp_path)) == tmp_path


def test_without_the_repository_copy_the_error_says_how_to_name_a_directory(tmp_path, monkeypatch):
    """An installed (non-editable) package has no data/benchmarks beside it."""
    monkeypatch.delenv("DEL_BENCHMARK_DIR", raising=False)
    missing = tmp_path / "site-packages" / "data" / "benchmarks"
    monkeypatch.setattr(benchmark_data, "REPOSITORY_DATA_DIR", missing)
    with pytest.raises(BenchmarkError) as err:
        data_dir_from(None)
    assert str(err.value).startswith(f"no benchmark directory: {missing} does not exist (del_core is installed")
    assert "pass data_dir=DIR or set DEL_BENCHMARK_DIR (DIR holds aqua, gsm8k, math," in str(err.value)


def test_the_repository_copy_matches_its_checksums_and_holds_every_row():
    folder = REPOSITORY / "data" / "benchmarks"
    listed = dict(line.split()[::-1] for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert sorted(listed) == sorted(benchmark_data.FILES.values())
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    counts = {name: len(load_benchmark(name, folder)) for name in benchmark_data.FILES}
    assert counts == {"gsm8k": 1319, "math": 5000, "svamp": 1000, "simuleq": 514, "aqua": 254, "sat": 220,
                      "mmlu_mathematics": 974}  # fmt: skip
