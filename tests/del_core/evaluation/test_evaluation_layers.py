"""The concerns of del_core.evaluation import downward only, checked on the code itself (imports
inside functions included): the question record and the answer readers below the benchmarks, the
held-out metrics and the grader check; the sandbox and generation on their own; nothing of
evaluation reaches up into training or the experiments; the confidence intervals stand below all."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.shared import REPO

EVALUATION = REPO / "del_core" / "evaluation"
# each concern (a sub-package, or a module at the package's root) -> the concerns it may import
MAY_IMPORT = {
    "question": set(),
    "sandbox": set(),
    "generation": set(),
    "answers": {"question"},
    "heldout": {"question", "answers"},
    "benchmarks": {"question", "answers", "sandbox", "generation"},
    "grader_check": {"question", "answers", "benchmarks"},
}
ABOVE_EVALUATION = ("del_core.training", "del_core.experiments", "del_core.integrations", "del_core.demo")


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:  # relative: resolve against the file's package
                package = path.relative_to(REPO).with_suffix("").parts[: -node.level]
                names.add(".".join([*package, node.module]))
            else:
                names.add(node.module)
    return names


def _concern(module: str) -> str | None:
    """``del_core.evaluation.answers.extract`` -> ``answers``; None outside evaluation."""
    parts = module.split(".")
    if parts[:2] != ["del_core", "evaluation"] or len(parts) < 3:
        return None
    return parts[2]


def _files_by_concern() -> dict[str, list[Path]]:
    files: dict[str, list[Path]] = {}
    for path in EVALUATION.rglob("*.py"):
        if path.parent == EVALUATION and path.name == "__init__.py":
            continue
        files.setdefault(path.relative_to(EVALUATION).parts[0].removesuffix(".py"), []).append(path)
    return files


def test_every_concern_has_a_rule():
    assert set(_files_by_concern()) == set(MAY_IMPORT)


def test_each_concern_imports_only_the_ones_below_it():
    upward = [
        f"{path.relative_to(REPO)} imports {module}"
        for concern, paths in _files_by_concern().items()
        for path in paths
        for module in sorted(_imported_modules(path))
        if _concern(module) not in (None, concern, *MAY_IMPORT[concern])
    ]
    assert not upward, upward


def test_the_rules_have_no_circle():
    placed: set[str] = set()
    while len(placed) < len(MAY_IMPORT):
        ready = {c for c, below in MAY_IMPORT.items() if c not in placed and below <= placed}
        assert ready, f"a circle among {set(MAY_IMPORT) - placed}"
        placed |= ready


def test_evaluation_never_reaches_up_into_training_or_the_experiments():
    upward = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in EVALUATION.rglob("*.py")
        for module in sorted(_imported_modules(path))
        if module.startswith(ABOVE_EVALUATION)
    ]
    assert not upward, upward


def test_confidence_intervals_import_nothing_of_the_package():
    modules = _imported_modules(REPO / "del_core" / "confidence.py")
    assert not [m for m in modules if m == "del_core" or m.startswith("del_core.")], modules
