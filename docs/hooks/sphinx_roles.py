"""Griffe extension: Sphinx roles in docstrings (``:func:`x```, ``:class:`~a.B```) read as code.

The docstrings cross-reference with Sphinx roles, which Markdown would print as written
(":meth:" followed by the name). Each role becomes inline code of its target (``~`` and a leading
``.`` dropped), before mkdocstrings renders the docstring.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|obj|exc|const):`~?\.?([^`]+)`")


class SphinxRolesAsCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
