"""docker/build_image.py's content keys, without podman: the image key follows the Dockerfile, the
files it copies (.dockerignore applied) and the torch wheel, and nothing else; the base key follows
the debootstrap inputs. And the Dockerfile's label defaults are the pins the image installs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import del_core
from helpers.container import build_module
from helpers.shared import REPO

build = build_module()


def test_the_copied_sources_are_read_from_the_dockerfile():
    assert build.copy_sources((REPO / "docker" / "Dockerfile").read_text()) == [
        "requirements.txt",
        "requirements-demo.txt",
        "pyproject.toml",
        "del_core",
        "recipes",
        "ds_configs",
        "launch",
        "docker/entrypoint.sh",
        "data/benchmarks",
        "README.md",
    ]
    text = "COPY --chown=1:1 a b/ ./\nCOPY --from=stage /x /y\nADD c \\\n    d /e\nRUN cp f g\n"
    assert build.copy_sources(text) == ["a", "b/", "c", "d"]


@pytest.mark.parametrize(
    "path, ignored",
    [
        ("del_core/__pycache__/x.pyc", True),
        ("del_core/losses/__pycache__/y.pyc", True),
        ("del_core.egg-info/PKG-INFO", True),
        ("tests/conftest.py", True),
        ("runs/a/b", True),
        ("del_core/losses/base.py", False),
        ("recipes/runs.py", False),
    ],
)
def test_dockerignore_patterns(path, ignored):
    assert build.is_ignored(path, build.dockerignore_patterns(REPO)) is ignored


@pytest.fixture
def context(tmp_path) -> Path:
    """A small build context: a Dockerfile copying two paths, a .dockerignore and a wheel folder."""
    root = tmp_path / "context"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM base\nCOPY requirements.txt ./\nCOPY pkg ./pkg\n")
    (root / ".dockerignore").write_text("**/__pycache__\ntests\n")
    (root / "requirements.txt").write_text("torch==2.13.0\n")
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\x00")
    (root / "del_core").mkdir()
    (root / "del_core" / "__init__.py").write_text('"""Doc."""\n\n__version__ = "1.2.3"\n')
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    return root


def _key(context: Path, base: str = "localhost/del-base:0") -> str:
    return build.ImageRecipe(context, context / "Dockerfile", base, context.parent / "wheels").key()


def test_the_image_key_follows_what_enters_the_image_and_nothing_else(context):
    key = _key(context)
    assert key == _key(context) and re.fullmatch(r"[0-9a-f]{16}", key)
    (context / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\x01")  # ignored
    (context / "tests" / "test_a.py").write_text("changed")  # ignored and not copied
    (context / "README.md").write_text("not copied")
    assert _key(context) == key
    changed = {}
    for name, change in {
        "a copied file": lambda: (context / "pkg" / "a.py").write_text("A = 2\n"),
        "a new copied file": lambda: (context / "pkg" / "b.py").write_text(""),
        "the requirements": lambda: (context / "requirements.txt").write_text("torch==2.13.0\nnumpy==2\n"),
        "the Dockerfile": lambda: (context / "Dockerfile").write_text("FROM base\nCOPY requirements.txt pkg ./\n"),
        "the torch wheel": lambda: next((context.parent / "wheels").glob("*.whl")).write_bytes(b"other"),
        "the package version": lambda: (context / "del_core" / "__init__.py").write_text('__version__ = "1.2.4"\n'),
    }.items():
        change()
        changed[name] = _key(context)
    assert len({key, *changed.values()}) == 1 + len(changed), changed
    assert _key(context, "localhost/del-base:1") != _key(context)


def test_the_wheel_folder_is_mounted_at_a_path_naming_its_content(context):
    recipe = build.ImageRecipe(context, context / "Dockerfile", "b", context.parent / "wheels")
    args = dict(recipe.build_args())
    assert args["BASE_IMAGE"] == "b" and args["TORCH_SOURCE"] == recipe.wheels_inside
    assert re.fullmatch(r"/wheels/[0-9a-f]{16}", recipe.wheels_inside)
    assert (args["PYTHON_SOURCE"], args["SYSTEM_PACKAGES"], args["ACCELERATOR"]) == ("system", "g++", "cpu")
    assert (args["DS_BUILD_FUSED_ADAM"], args["DS_BUILD_CPU_ADAM"]) == ("0", "0")
    assert args["DEL_VERSION"] == "1.2.3"


def test_the_label_version_is_read_from_the_package(context, capsys):
    assert build.package_version(REPO) == del_core.__version__
    assert build.main(["--package-version"]) == 0 and capsys.readouterr().out == del_core.__version__ + "\n"
    (context / "del_core" / "__init__.py").write_text("__version__ = 3\n")
    with pytest.raises(build.BuildError, match=r'del_core/__init__\.py: no line __version__ = "X\.Y\.Z"'):
        build.package_version(context)


def test_a_missing_torch_wheel_is_named_with_the_fix(context):
    shutil.rmtree(context.parent / "wheels")
    (context.parent / "wheels").mkdir()
    with pytest.raises(build.BuildError, match=r"no torch-2\.13\.0 wheel in .*wheels: pass --wheels DIR"):
        _key(context)


def test_the_base_key_follows_its_debootstrap_inputs(tmp_path):
    ca = tmp_path / "site.crt"
    ca.write_text("certificate 1")
    recipe = build.BaseRecipe(ca_files=(ca,))
    key = recipe.key()
    assert build.BaseRecipe(ca_files=(ca,)).key() == key
    assert build.BaseRecipe(suite="trixie", ca_files=(ca,)).key() != key
    assert build.BaseRecipe(packages=("ca-certificates", "curl"), ca_files=(ca,)).key() != key
    ca.write_text("certificate 2")
    assert build.BaseRecipe(ca_files=(ca,)).key() != key
    assert recipe.site_files()["/etc/pip.conf"] == b"[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"


def test_the_label_defaults_are_the_installed_pins_and_the_default_base_is_cuda():
    text = (REPO / "docker" / "Dockerfile").read_text()
    defaults = dict(re.findall(r'^ARG (\w+)=("[^"]*"|\S*)$', text, flags=re.M))
    pins = dict(re.findall(r"^([a-z_-]+)==(\S+)", (REPO / "requirements.txt").read_text(), flags=re.M))
    assert "DEL_VERSION" not in defaults and re.search(r"^ARG DEL_VERSION$", text, flags=re.M)
    assert (defaults["TORCH_VERSION"], defaults["DEEPSPEED_VERSION"], defaults["TRANSFORMERS_VERSION"]) == (
        pins["torch"],
        pins["deepspeed"],
        pins["transformers"],
    )
    assert defaults["BASE_IMAGE"] == "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04"
    assert defaults["ACCELERATOR"] == '"cuda 12.8"' and defaults["PYTHON_SOURCE"] == "deadsnakes"
    assert defaults["TORCH_CUDA"] == "cu128"
    assert defaults["TORCH_SOURCE"] == "https://download.pytorch.org/whl/${TORCH_CUDA}"
