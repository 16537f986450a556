"""The release bookkeeping: one version (del_core.__version__, which pyproject.toml reads) with its section in
CHANGELOG.md, every removal there with its migration, and the changelog's links to the docs
pointing at pages and headings that exist."""

from __future__ import annotations

import re

import del_core
from helpers.shared import REPO

CHANGELOG = REPO / "CHANGELOG.md"


def _sections(text: str, level: str) -> dict[str, str]:
    """Heading -> body of the headings of ``level`` ("## " or "### ") in ``text``."""
    parts = re.split(rf"^{level}(.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def _slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (its default toc slugify)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def _toml_table(text: str, name: str) -> str:
    """The lines of the TOML table ``[name]`` in ``text`` (up to the next table header)."""
    return text.split(f"\n[{name}]\n", 1)[1].split("\n[", 1)[0]


def test_one_version_with_its_changelog_section():
    pyproject = (REPO / "pyproject.toml").read_text()
    project = _toml_table(pyproject, "project")
    assert not re.search(r"^version =", project, re.M), "pyproject.toml states a second copy of the version"
    assert re.search(r'^dynamic = \[[^]]*"version"', project, re.M)
    dynamic = _toml_table(pyproject, "tool.setuptools.dynamic")
    assert re.search(r'^version = \{ attr = "del_core\.__version__" \}$', dynamic, re.M)
    releases = [heading.split("]")[0].lstrip("[") for heading in _sections(CHANGELOG.read_text(), "## ")]
    # What is merged after a release is listed under "Unreleased", above it, until the next one.
    released = releases[1:] if releases[0] == "Unreleased" else releases
    assert released[0] == del_core.__version__ and "Unreleased" not in released


def test_every_removal_states_its_migration():
    for release, body in _sections(CHANGELOG.read_text(), "## ").items():
        removed = _sections(body, "### ").get("Removed", "")
        entries = re.split(r"^- ", removed, flags=re.MULTILINE)[1:]
        assert all("Migration:" in entry for entry in entries), release


def test_the_changelog_links_to_docs_that_exist():
    links = re.findall(r"\]\((docs/[\w/]+\.md)(?:#([\w-]+))?\)", CHANGELOG.read_text())
    assert ("docs/development.md", "deprecation-policy") in links
    for page, anchor in links:
        text = (REPO / page).read_text()
        headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
        assert not anchor or anchor in {_slug(h) for h in headings}, f"{page}#{anchor}"


def test_slug_follows_mkdocs():
    assert _slug("Sequence parallelism: `parallel.sp`") == "sequence-parallelism-parallelsp"
    assert _slug("Deprecation policy") == "deprecation-policy"
