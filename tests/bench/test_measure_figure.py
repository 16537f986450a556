"""tests/bench/measure_figure.py writes a figure into the figures file the docs hook reads: the value
and measured replaced, the figure's `stated` patterns, the other figures and the comments kept."""

from __future__ import annotations

import shutil

import pytest

from helpers.scripts import script_module
from helpers.shared import REPO

measure = script_module(REPO / "tests" / "bench" / "measure_figure.py", "measure_figure")
hook = script_module(REPO / "docs" / "hooks" / "figures.py", "docs_figures_hook")


@pytest.mark.parametrize(
    "seconds, text",
    [(45.4, "45 s"), (59.6, "1 min 0 s"), (373.2, "6 min 13 s"), (2221, "37 min 1 s"), (4763, "1 h 19 min")],
)
def test_a_wall_time_reads_as_the_pages_write_it(seconds, text):
    assert measure.duration_text(seconds) == text


def test_a_figure_is_rewritten_and_everything_else_kept(tmp_path):
    path = tmp_path / "figures.yaml"
    shutil.copy(REPO / "docs" / "figures.yaml", path)
    before = hook.load_figures(path)
    text = path.read_text()
    for name in ("make_train_time", "main_job_heldout", "numeric_bench_smoke_time"):  # first, block value, last
        measure.write_figure(path, name, "9 min 9 s", 'by "hand": 2 cores')
    after = hook.load_figures(path)
    assert after.keys() == before.keys()
    for name, figure in after.items():
        changed = name in ("make_train_time", "main_job_heldout", "numeric_bench_smoke_time")
        assert (figure.value, figure.measured) == (
            ("9 min 9 s", 'by "hand": 2 cores') if changed else (before[name].value, before[name].measured)
        ), name
        assert figure.stated == before[name].stated, name
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert [line for line in path.read_text().splitlines() if line.startswith("#")] == comments


def test_a_new_figure_is_added_at_the_end(tmp_path):
    path = tmp_path / "figures.yaml"
    path.write_text("# figures\n\na_time:\n  value: 1 s\n  measured: once\n  stated:\n    - 'x {duration}'\n")
    measure.write_figure(path, "b_time", "2 s", "twice")
    figures = hook.load_figures(path)
    assert [(f.name, f.value, f.measured, f.stated) for f in figures.values()] == [
        ("a_time", "1 s", "once", ("x {duration}",)),
        ("b_time", "2 s", "twice", ()),
    ]
    with pytest.raises(ValueError, match=r"figure name 'B-time'"):
        measure.write_figure(path, "B-time", "1 s", "x")
