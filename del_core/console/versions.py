"""The training stack's versions in one line: what the image's label ``org.del.versions`` and
``IMAGE --version`` say (docker/Dockerfile, docker/entrypoint.sh).

    python -m del_core.console.versions                 # del_core X.Y.Z, torch 2.13.0, ..., cpu
    python -m del_core.console.versions --expect LINE   # exit 1 naming the difference (build check)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version


@dataclass(frozen=True)
class StackVersions:
    """Release versions (no local label such as ``+cpu``) and the accelerator torch is built for."""

    del_core: str
    torch: str
    deepspeed: str
    transformers: str
    accelerator: str  # "cuda 12.8" (torch.version.cuda) or "cpu"

    def line(self) -> str:
        return (
            f"del_core {self.del_core}, torch {self.torch}, deepspeed {self.deepspeed}, "
            f"transformers {self.transformers}, {self.accelerator}"
        )


def _release(distribution: str) -> str:
    """The installed version of ``distribution`` without its local label; "absent" when not installed."""
    try:
        return version(distribution).split("+", 1)[0]
    except PackageNotFoundError:
        return "absent"


def installed_versions() -> StackVersions:
    """The versions installed in this interpreter (imports torch, to ask which accelerator it is for)."""
    import torch

    cuda = torch.version.cuda
    return StackVersions(
        del_core=_release("del-core"),
        torch=_release("torch"),
        deepspeed=_release("deepspeed"),
        transformers=_release("transformers"),
        accelerator=f"cuda {cuda}" if cuda else "cpu",
    )


def main(argv: list[str]) -> int:
    line = installed_versions().line()
    if argv[:1] == ["--expect"] and len(argv) == 2:
        if argv[1] != line:
            print(f"error: installed {line!r}, expected {argv[1]!r} (the image's label would lie)", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python -m del_core.console.versions [--expect LINE]", file=sys.stderr)
        return 2
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
