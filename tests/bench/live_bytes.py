"""Exact peak of the tensor memory a step allocates, on any device, from the ops themselves.

On CPU the process RSS is a noisy proxy (the allocator keeps freed pages); this tracker instead
records every tensor storage an op creates during the step (forward and backward: the dispatch
mode is active in the autograd engine's CPU thread too), adds its bytes while it is alive and
subtracts them when it is freed, and reports the peak. Storages that existed before the step
(inputs, parameters) are not counted; views share their base's storage and are counted once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class _LiveBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # storage id -> bytes
        self.current = 0
        self.peak = 0
        self._known: set[int] = set()

    def _release(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live or key in self._known:
            return
        size = storage.nbytes()
        self.live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._release, key)


def mark_existing(mode: _LiveBytes, tensors) -> None:
    """Storages alive before the step (not counted when an op returns them, e.g. in-place ops)."""
    for tensor in tensors:
        mode._known.add(tensor.untyped_storage()._cdata)


def peak_live_bytes(step: Callable[[], None], existing=()) -> int:
    """Peak bytes of tensor storages created during ``step()`` and alive at the same time."""
    mode = _LiveBytes()
    mark_existing(mode, existing)
    with mode:
        step()
    return mode.peak
