"""No two modules of del_core import each other, directly or through others, counting the imports
inside functions too (a cycle hidden in a function still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.shared import REPO

PACKAGE = REPO / "del_core"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _imported(node: ast.AST, package: str, modules: dict) -> set[str]:
    """The del_core modules an import statement uses: ``from pkg import sub`` is the submodule
    ``pkg.sub`` (not pkg's own code); ``from pkg import name`` is ``pkg``."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    used = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        used.add(submodule if submodule in modules else base)
    return used & set(modules)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            edges |= _imported(node, package, modules)
        graph[name] = edges - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_del_core():
    graph = _graph()
    assert (
        "del_core.experiments.numeric_bench.score_unit" in graph["del_core.experiments.numeric_bench.run_unit"]
    )  # the graph sees imports
    assert _cycles(graph) == []
