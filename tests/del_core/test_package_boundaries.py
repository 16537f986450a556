"""The package's dependency rules, checked on the code itself (imports inside functions included):
the losses, the parallel layer, the data pipeline and the engines package import without
DeepSpeed; torch.distributed is used only in del_core.parallel (and FSDP2's sharding and
checkpoints in del_core/engines/fsdp2/); DeepSpeed only in del_core/engines/deepspeed/; the
engines never import the trainer (del_core.training), and nothing outside del_core/engines asks
which engine runs; the Trainer adapter (del_core.integrations) never imports the trainer; entry
scripts stay short and functions small."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.shared import REPO

PACKAGE = REPO / "del_core"
BLOCK_DEEPSPEED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "deepspeed" or name.startswith("deepspeed."):
            raise ImportError("deepspeed is absent in this test")
sys.meta_path.insert(0, Block())
"""


@pytest.mark.launches
@pytest.mark.parametrize(
    "module",
    [
        "del_core",
        "del_core.losses",
        "del_core.parallel",
        "del_core.data",
        "del_core.config",
        "del_core.console",
        "del_core.models",
        "del_core.training",
        "del_core.plain_loop",
        "del_core.training.schedule",
        "del_core.engines",
        "del_core.engines.registry",
        "del_core.engines.deepspeed",
        "del_core.engines.fsdp2",
        "del_core.engines.ddp",
        "del_core.experiments.study",
        "del_core.experiments.numeric_bench.protocol",
    ],
)
def test_imports_without_deepspeed(module):
    code = BLOCK_DEEPSPEED + f"import {module}\nassert 'deepspeed' not in sys.modules\nprint('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.launches
def test_the_blocker_really_blocks():
    code = BLOCK_DEEPSPEED + "import deepspeed"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "deepspeed is absent" in proc.stderr


def _imports(path: Path, root: Path = REPO) -> set[str]:
    """The modules ``path`` (a file under ``root``) imports, anywhere in it (function bodies too);
    relative imports as the absolute names they resolve to (``from .x import y`` in
    del_core/a/b.py: del_core.a.x)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}  # from del_core import training
    return names


def _modules_importing(prefix: str, under: Path = PACKAGE, root: Path = REPO) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in under.rglob("*.py")
        if any(name == prefix or name.startswith(prefix + ".") for name in _imports(p, root))
    )


def test_torch_distributed_only_in_the_parallel_layer_and_the_fsdp2_engine():
    """Process groups and collectives in del_core/parallel; FSDP2's sharding and
    torch.distributed.checkpoint only in its engine, del_core/engines/fsdp2/engine.py."""
    allowed = [p for p in _modules_importing("torch.distributed") if not p.startswith("del_core/engines/fsdp2/")]
    assert all(path.startswith("del_core/parallel/") for path in allowed), allowed
    for engine_part in ("torch.distributed.fsdp", "torch.distributed.checkpoint"):
        assert _modules_importing(engine_part) == ["del_core/engines/fsdp2/engine.py"], engine_part


def test_deepspeed_only_in_the_engines_package():
    assert _modules_importing("deepspeed") == ["del_core/engines/deepspeed/glue.py"]
    assert not any("recipes" in name for p in PACKAGE.rglob("*.py") for name in _imports(p))


def test_the_engines_never_import_the_trainer():
    """The engines sit below the trainer: they read the recipe's sections they own
    (del_core.engines.settings), the trainer imports them, never the other way round."""
    assert _modules_importing("del_core.training", PACKAGE / "engines") == []


# Files allowed a named engine question, with the names: none (the HF Trainer adapter asks
# del_core.engines.deepspeed.parameters_partitioned whether its weights are partitioned).
ENGINE_QUESTIONS_ALLOWED: dict[str, set[str]] = {}


ENGINE_SWITCH = re.compile(r"^_?(zero3|fsdp2)$|(zero3|fsdp2)_enabled$")


def _engine_questions(path: Path, root: Path = REPO) -> list[str]:
    """Where ``path`` asks which engine runs, in function bodies too: a comparison with an engine's
    name or with an ``.engine`` attribute, or a switch named after ZeRO-3 or FSDP2 (``_zero3``,
    ``fsdp2``, ``is_deepspeed_zero3_enabled``; a constant of the ZeRO-3 memory model is no switch)."""
    from del_core.engines import ENGINE_NAMES

    allowed = ENGINE_QUESTIONS_ALLOWED.get(str(path.relative_to(root)), set())
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            names = {o.value for o in operands if isinstance(o, ast.Constant) and isinstance(o.value, str)}
            if names & set(ENGINE_NAMES) or any(isinstance(o, ast.Attribute) and o.attr == "engine" for o in operands):
                found.append(f"line {node.lineno}: compares with the engine")
        name = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None)
        if isinstance(name, str) and ENGINE_SWITCH.search(name) and name not in allowed:
            found.append(f"line {node.lineno}: {name}")
    return found


def test_nothing_outside_the_engines_asks_which_engine_runs():
    """Each engine's life is its backend's: no ``parallel.engine == ...`` or ZeRO-3 test elsewhere."""
    asking = {
        str(p.relative_to(REPO)): found
        for root in (PACKAGE, REPO / "recipes")
        for p in root.rglob("*.py")
        if not p.is_relative_to(PACKAGE / "engines") and (found := _engine_questions(p))
    }
    assert asking == {}, asking


def test_the_engine_question_finder_sees_function_bodies(tmp_path):
    """The check above would pass on a finder that misses these."""
    probe = tmp_path / "del_core" / "training" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "def f(config):\n    if config.parallel.engine == 'fsdp2':\n        return 1\n"
        "    return g(self_zero3=True)\n\n\nclass T:\n    def _zero3(self):\n        return 'deepspeed' != x.engine\n"
    )
    found = _engine_questions(probe, tmp_path)
    assert len([f for f in found if "compares" in f]) == 2 and any("_zero3" in f for f in found), found


def test_the_trainer_adapter_never_imports_the_deepspeed_trainer():
    """del_core.integrations shares the loss set-up (del_core.losses) and the DeepSpeed glue
    (del_core.engines) with the trainer; it imports nothing of del_core.training."""
    assert _modules_importing("del_core.training", PACKAGE / "integrations") == []


def test_the_import_reader_sees_function_bodies_and_relative_imports(tmp_path):
    """The checks above would pass on a reader that misses these (the 0.1 adapter imported
    del_core.training.engine inside a function)."""
    module = tmp_path / "del_core" / "integrations" / "probe.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "def f():\n    from del_core.training.engine import gradient_divisor\n\n\nfrom ..training import x\n"
    )
    assert _imports(module, tmp_path) >= {"del_core.training.engine", "del_core.training", "del_core.training.x"}
    assert _modules_importing("del_core.training", module.parent, tmp_path) == ["del_core/integrations/probe.py"]


MAX_FUNCTION_LINES = 80
ENTRY_SCRIPT_LINES = 60


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def test_no_function_is_over_80_lines():
    long = [
        f"{p.relative_to(REPO)}:{line} {name} ({n} lines)"
        for root in (PACKAGE, REPO / "recipes")
        for p in root.rglob("*.py")
        for name, line, n in _functions(p)
        if n > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_entry_scripts_are_short_and_never_patch_sys_path():
    scripts = sorted((REPO / "recipes").glob("*.py"))
    assert {p.name for p in scripts} == {
        "train.py",
        "evaluate.py",
        "study.py",
        "loss_demo.py",
        "numeric_bench.py",
        "grade_corpus.py",
        "memory_estimate.py",
    }
    for script in scripts:
        text = script.read_text()
        assert len(text.splitlines()) < ENTRY_SCRIPT_LINES, script
        assert "sys.path" not in text, script
