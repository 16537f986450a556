"""Where the processes of a run meet: a free TCP port on this host for a single-node rendezvous."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; a race is possible)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
