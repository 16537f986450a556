"""A script of the repository (docker/build_image.py, docs/hooks/figures.py, tests/bench/...) loaded
as a module, for tests of its functions: the scripts are not part of the package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def script_module(path: Path, name: str) -> ModuleType:
    """The script at ``path`` as the module ``name`` (registered in ``sys.modules`` first, as
    dataclasses and pickling look a class's module up there); loaded once per name."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
