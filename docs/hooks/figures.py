"""MkDocs hook: the measured figures, the package version and the README's sections, each written
once and shown on the pages that state them.

A page writes ``{{ figures.NAME }}`` for a measured figure of ``docs/figures.yaml`` (its value),
``{{ version }}`` for ``del_core.__version__`` (read from ``del_core/__init__.py``, not imported),
``{{ readme }}`` for the whole README and ``{{ readme.SECTION }}`` for the body of one of its ``##``
sections (SECTION: the heading's anchor, e.g. ``results``, ``set-up``), with the README's
``docs/...`` links made relative to the page. An unknown name stops the build naming the page.
Inside an inline code span (single backticks) a placeholder is text, so a page can show the syntax.
The site's footer says the version.

The functions below import nothing of MkDocs: tests/docs/ renders pages with them without building
the site.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

# Group 1: an inline code span, left as it is; group 2: a placeholder's name.
PLACEHOLDER = re.compile(r"(?<!`)(`[^`\n]+`)(?!`)|\{\{\s*([\w.-]+)\s*\}\}")
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)
README_LINK = re.compile(r"\]\(docs/([^)\s]+)\)")
SECTION_HEADING = re.compile(r"^## (.+)$", re.MULTILINE)


class FigureError(ValueError):
    """A placeholder that names nothing, or a figures file or version line that cannot be read."""


@dataclass(frozen=True)
class Figure:
    """One measured figure: its value as pages state it, how and where it was measured, and the
    regular expressions that find a statement of it on a page (group 1: the value stated)."""

    name: str
    value: str
    measured: str
    stated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sources:
    """What the placeholders read: the figures, the package version and the README's text."""

    figures: dict[str, Figure]
    version: str
    readme: str


def load_figures(path: Path) -> dict[str, Figure]:
    """The figures of ``path`` (docs/figures.yaml): NAME -> {value, measured, stated (optional)}."""
    entries = yaml.safe_load(path.read_text())
    figures = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not {"value", "measured"} <= entry.keys():
            raise FigureError(f"{path}: figure {name!r} needs 'value' and 'measured'")
        stated = entry.get("stated", [])
        figures[name] = Figure(name, str(entry["value"]), entry["measured"], tuple(stated))
    return figures


def package_version(root: Path) -> str:
    """``del_core.__version__`` as ``del_core/__init__.py`` writes it."""
    path = root / "del_core" / "__init__.py"
    found = VERSION_LINE.search(path.read_text())
    if found is None:
        raise FigureError(f'{path}: no line __version__ = "X.Y.Z"')
    return found.group(1)


def load_sources(root: Path) -> Sources:
    """The sources of a checkout whose root is ``root``."""
    return Sources(
        load_figures(root / "docs" / "figures.yaml"), package_version(root), (root / "README.md").read_text()
    )


def _slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (its default toc slugify)."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def readme_sections(readme: str) -> dict[str, str]:
    """The body of each ``##`` section of the README (heading line left out), by the heading's anchor."""
    parts = SECTION_HEADING.split(readme)
    return {_slug(heading): body.strip("\n") + "\n" for heading, body in zip(parts[1::2], parts[2::2])}


def _relative_links(text: str, page: str) -> str:
    """The README's ``](docs/X)`` links as links from the docs page ``page`` (docs-relative path)."""
    folder = posixpath.dirname(page) or "."
    return README_LINK.sub(lambda m: f"]({posixpath.relpath(m.group(1), folder)})", text)


def placeholders(markdown: str) -> list[str]:
    """The names of the placeholders in ``markdown`` (those in inline code spans are text)."""
    return [match.group(2) for match in PLACEHOLDER.finditer(markdown) if match.group(2)]


def render(markdown: str, page: str, sources: Sources) -> str:
    """``markdown`` (the docs page ``page``, docs-relative) with every placeholder replaced."""
    sections = readme_sections(sources.readme)

    def value(match: re.Match) -> str:
        if match.group(1):
            return match.group(1)
        name = match.group(2)
        kind, _, key = name.partition(".")
        if name == "version":
            return sources.version
        if kind == "figures" and key in sources.figures:
            return sources.figures[key].value
        if name == "readme":
            return _relative_links(sources.readme, page)
        if kind == "readme" and key in sections:
            return _relative_links(sections[key], page)
        known = ", ".join(sorted(sources.figures))
        raise FigureError(
            f"{page}: {{{{ {name} }}}} names nothing (version, readme, readme.<section>: "
            f"{', '.join(sections)}; figures.<name>: {known})"
        )

    return PLACEHOLDER.sub(value, markdown)


_sources: Sources | None = None


def on_config(config):
    global _sources
    _sources = load_sources(Path(config.config_file_path).resolve().parent)
    config.copyright = f"del-core {_sources.version}"
    return config


def on_page_markdown(markdown, page, config, files):
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown, page.file.src_uri, _sources)
    except FigureError as error:
        raise PluginError(str(error)) from error
