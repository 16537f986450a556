"""MkDocs hook: every API page's objects must import.

mkdocstrings reads the code statically and silently leaves out a name that the package's
``__init__`` exports but cannot import. This hook imports each ``::: dotted.path`` of a page (the
longest importable module prefix, then the attributes after it) and every name in that module's
``__all__``; a failure is a build error naming the page, the path and the exception.
The repository root goes first on ``sys.path``, so the checkout being documented is the one imported.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

IDENTIFIER = re.compile(r"^:::\s+([\w.]+)", re.MULTILINE)


def on_config(config):
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def _resolve(path: str) -> object:
    """The object at a dotted path: the longest importable module prefix, then attribute access."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name and ".".join(parts[:cut]).startswith(error.name):
                continue  # this prefix is not a module: try a shorter one
            raise
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(path)


def on_page_markdown(markdown, page, config, files):
    for path in IDENTIFIER.findall(markdown):
        try:
            target = _resolve(path)
            missing = [name for name in getattr(target, "__all__", ()) if not hasattr(target, name)]
        except Exception as error:  # any failure to import is the page's error
            raise PluginError(f"{page.file.src_path}: '{path}' does not import: {error!r}") from error
        if missing:
            raise PluginError(f"{page.file.src_path}: '{path}' exports names that do not import: {missing}")
    return markdown
