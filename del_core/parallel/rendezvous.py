"""Where the processes of a run meet: a free TCP port on this host for a single-node rendezvous,
the environment of a run started without a launcher, and torch's own process group."""

from __future__ import annotations

import os
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; a race is possible)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def single_process_environment() -> None:
    """Without a launcher (no ``RANK`` in the environment): the variables of a world of one
    process, on a free local port."""
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )


def init_process_group(on_gpu: bool) -> None:
    """torch's default process group (nccl on GPU, each rank on its local device; gloo on CPU)
    for an engine that brings none of its own (FSDP2). Without a launcher, one process."""
    import torch
    import torch.distributed as dist

    single_process_environment()
    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend="nccl" if on_gpu else "gloo")
