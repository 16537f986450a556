"""Each measured figure and the version are written once: every page that states one (the README as
GitHub shows it, CHANGELOG.md, and the docs pages as the site renders them from docs/figures.yaml,
del_core/__init__.py and the README) states the same value, and the README's results rows agree
with the reports they link to."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

import del_core
from helpers.scripts import script_module
from helpers.shared import REPO

hook = script_module(REPO / "docs" / "hooks" / "figures.py", "docs_figures_hook")

SOURCES = hook.load_sources(REPO)
# A time as pages write one: "6 min 13 s", "~37 min", "156-211 s", "1 h 19 min"; not a threshold ("over ~2 s").
DURATION = r"(?<![\w.~-])(?<!over )(?<!over ~)(~?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:h|min|s)\b(?: \d+ (?:min|s)\b)?)"
COUNT = r"(?<![\w.=,])(\d[\d,]*\d|\d)"
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def _pages(sources) -> dict[str, str]:
    """Every page that states figures, as a reader sees it: the README and the changelog as written,
    the docs pages rendered."""
    pages = {name: (REPO / name).read_text() for name in ("README.md", "CHANGELOG.md")}
    for path in sorted((REPO / "docs").rglob("*.md")):
        page = path.relative_to(REPO / "docs").as_posix()
        pages[f"docs/{page}"] = hook.render(path.read_text(), page, sources)
    return pages


def _units(text: str) -> list[str]:
    """Where one statement can lie: a paragraph, list item or code block of prose, or a table row."""
    units = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if any(line.lstrip().startswith("|") for line in lines):
            units += lines
        else:
            units += re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", block)
    return units


def _pattern(stated: str) -> re.Pattern:
    return re.compile(stated.replace("{duration}", DURATION).replace("{count}", COUNT))


def statements(figure, pages: dict[str, str]) -> list[tuple[str, str]]:
    """(page, value stated) for every statement of ``figure`` on ``pages``."""
    found = []
    for name, text in pages.items():
        for unit in _units(text):
            for stated in figure.stated:
                for match in _pattern(stated).finditer(unit):
                    found.append((name, next(group for group in match.groups() if group is not None)))
    return found


def disagreements(figures: dict, pages: dict[str, str]) -> list[str]:
    """One line per statement whose value differs from the figure's source."""
    return [
        f"{page}: {name} stated as {value!r}, docs/figures.yaml says {figure.value!r}"
        for name, figure in figures.items()
        for page, value in statements(figure, pages)
        if value != figure.value
    ]


PAGES = _pages(SOURCES)


def test_every_page_states_each_figure_as_its_source_does():
    assert disagreements(SOURCES.figures, PAGES) == []


@pytest.mark.parametrize("name", sorted(SOURCES.figures))
def test_each_figure_is_stated_and_found(name):
    """A figure no page states is dead, and one whose patterns find nothing is not checked."""
    figure = SOURCES.figures[name]
    assert figure.measured.strip() and figure.stated, name
    assert statements(figure, PAGES), f"{name}: no page states it (or its 'stated' patterns are wrong)"


def test_a_page_stating_another_value_is_caught():
    figures = SOURCES.figures
    page = {
        "docs/x.md": "```bash\nmake train   # on CPU (~4-10 min)\nmake test    # (~15-20 min on 2 cores)\n```\n\n"
        "`make test-fast`: no process starts, nothing over ~2 s (990 of the 1,001 tests).\n\n"
        "| cold build | 156-211 s |\n"
    }
    stated = {
        "image_cold_build": "156-211 s",
        "make_test_time": "~15-20 min",
        "make_train_time": "~4-10 min",
        "test_count": "1,001",
        "test_fast_count": "990",
    }
    assert sorted(disagreements(figures, page)) == [
        f"docs/x.md: {name} stated as '{value}', docs/figures.yaml says '{figures[name].value}'"
        for name, value in sorted(stated.items())
    ]


def test_every_placeholder_names_a_source_and_every_figure_is_shown():
    used = set()
    for path in (REPO / "docs").rglob("*.md"):
        used |= set(hook.placeholders(path.read_text()))
    rendered_readme = PAGES["README.md"]
    for name, figure in SOURCES.figures.items():
        assert f"figures.{name}" in used or figure.value in rendered_readme, f"{name} is shown nowhere"


def test_an_unknown_placeholder_stops_the_build_naming_the_page():
    with pytest.raises(hook.FigureError, match=r"^guide\.md: \{\{ figures\.make_tarin_time \}\} names nothing"):
        hook.render("takes {{ figures.make_tarin_time }}", "guide.md", SOURCES)


def test_a_placeholder_in_inline_code_is_text():
    text = "shown as `{{ figures.NAME }}` and ``{{ x }}``; ```\nmake train  # {{ figures.make_train_time }}\n```"
    assert hook.placeholders(text) == ["x", "figures.make_train_time"]
    assert hook.render("`{{ figures.NAME }}`: {{ figures.make_train_time }}", "p.md", SOURCES) == (
        f"`{{{{ figures.NAME }}}}`: {SOURCES.figures['make_train_time'].value}"
    )


def test_readme_links_are_made_relative_to_the_page():
    sources = hook.Sources({}, "9.9.9", "# T\n\n## Results\n\n[a](docs/results/study.md), [b](docs/spec.md#x)\n")
    assert hook.render("{{ readme.results }}", "results/index.md", sources) == "[a](study.md), [b](../spec.md#x)\n"
    assert hook.render("v{{ version }}", "index.md", sources) == "v9.9.9"
    assert "[b](spec.md#x)" in hook.render("{{ readme }}", "index.md", sources)


def test_the_home_page_and_the_results_index_restate_nothing_of_their_own():
    home = (REPO / "docs" / "index.md").read_text()
    assert "{{ readme }}" in home and not re.search(r"\d", home)
    assert "{{ readme.results }}" in (REPO / "docs" / "results" / "index.md").read_text()


def _numbers(text: str) -> list[Decimal]:
    return [Decimal(token.replace(",", "")) for token in NUMBER.findall(text)]


def _states(page_numbers: list[Decimal], number: Decimal) -> bool:
    """Whether a page states ``number``, exactly or to more places that round to it."""
    places = Decimal(1).scaleb(number.as_tuple().exponent)
    exponent = number.as_tuple().exponent
    return any(value.quantize(places) == number for value in page_numbers if value.as_tuple().exponent <= exponent)


README_ROWS = [
    line for line in hook.readme_sections(SOURCES.readme)["results"].splitlines() if re.match(r"\| [^-]", line)
][1:]


@pytest.mark.parametrize("row", README_ROWS, ids=lambda row: row.split("|")[1].strip()[:40])
def test_a_readme_results_row_states_what_its_report_does(row):
    question, result, report = (cell.strip() for cell in row.strip().strip("|").split("|"))
    page = re.search(r"\]\(docs/([^)#]+)", report).group(1)
    page_numbers = _numbers(PAGES[f"docs/{page}"])
    missing = [str(number) for number in _numbers(result) if not _states(page_numbers, number)]
    assert not missing, f"README's results row {question!r} states {missing}, which docs/{page} does not"


def test_a_results_row_disagreeing_with_its_report_is_caught():
    assert _states(_numbers("ratio 0.1149 and 8192 tokens"), Decimal("0.115"))
    assert _states(_numbers("8192 tokens"), Decimal("8192"))
    assert not _states(_numbers("ratio 0.1149"), Decimal("0.116"))
    assert not _states(_numbers("ratio 0.12"), Decimal("0.115"))  # a page's coarser value states less


def _text_files() -> list[Path]:
    roots = ["README.md", "pyproject.toml", "Makefile", "docs", "docker", "del_core", "launch", "recipes", "tests"]
    files = []
    for root in map(REPO.joinpath, roots):
        files += [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    return [path for path in files if path.suffix not in {".png", ".pyc", ".whl"} and "__pycache__" not in path.parts]


def test_no_file_states_another_release_as_the_version():
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert releases[0] == del_core.__version__
    old = re.compile(rf"(?<![\w.=-])(?:{'|'.join(map(re.escape, releases[1:]))})(?![\w.])")
    stale = [str(p.relative_to(REPO)) for p in _text_files() if old.search(p.read_text(errors="ignore"))]
    assert stale == [], f"an earlier release's version outside CHANGELOG.md: {stale}"


# A statement of this package's version: "del_core 0.3.0", "version: 0.3.0", "DEL_VERSION=0.3.0".
VERSION_STATEMENT = re.compile(r"(?:\bdel[_-]core|\b[Vv]ersion|\b[Rr]elease|DEL_VERSION)[ =:]+v?(\d+\.\d+\.\d+)\b")


def test_the_docs_and_the_image_state_the_package_version():
    texts = {name: text for name, text in PAGES.items() if name != "CHANGELOG.md"}
    texts |= {str(path.relative_to(REPO)): path.read_text() for path in (REPO / "docker").iterdir() if path.is_file()}
    stated = {(name, version) for name, text in texts.items() for version in VERSION_STATEMENT.findall(text)}
    assert ("docs/docker.md", del_core.__version__) in stated  # IMAGE --version, as the site shows it
    assert {version for _, version in stated} == {del_core.__version__}, sorted(stated)
    assert hook.package_version(REPO) == del_core.__version__
    assert VERSION_STATEMENT.findall("del_core 9.8.7, torch 2.13.0; version: 1.2.3; --build-arg DEL_VERSION=4.5.6") == [
        "9.8.7",
        "1.2.3",
        "4.5.6",
    ]


def test_figures_file_entries_need_value_and_measured(tmp_path: Path):
    path = tmp_path / "figures.yaml"
    path.write_text("make_train_time:\n  value: 1 min\n")
    with pytest.raises(hook.FigureError, match=r"figure 'make_train_time' needs 'value' and 'measured'"):
        hook.load_figures(path)
