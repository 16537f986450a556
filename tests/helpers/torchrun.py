"""The one command line the tests and benchmarks start local ranks with: ``python -m
torch.distributed.run`` (torchrun) of the running interpreter on a free port of this machine."""

from __future__ import annotations

import sys
from os import PathLike

from del_core.parallel.rendezvous import free_port


def torchrun_command(nproc: int, *args: str | PathLike) -> list[str]:
    """``python -m torch.distributed.run --nproc_per_node=NPROC --master_port=PORT ARGS``: ``nproc``
    local ranks, each running ``args`` (a script and its arguments), meeting on a free port."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        f"--master_port={free_port()}",
        *map(str, args),
    ]
