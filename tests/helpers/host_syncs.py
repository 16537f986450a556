"""Count the host-device synchronisations a block of code would cause on an accelerator, on CPU.

On a GPU, ``torch.cuda.set_sync_debug_mode`` reports syncs; on CPU nothing syncs, so this counter
looks at the operations instead: every op that on an accelerator either stalls the host until the
stream is drained, or copies host data into a device tensor (a blocking copy unless pinned):

* ``aten._local_scalar_dense`` (``.item()``, ``bool(t)``, ``int(t)``, ``float(t)``), ``aten.is_nonzero``
  and ``aten.equal`` (a host bool);
* ``aten.nonzero`` (and so boolean-mask indexing): its output size is data-dependent;
* ``aten.lift_fresh`` (``torch.tensor(host data)``, ``torch.as_tensor(python number)``): a
  host-to-device copy when made on, or moved to, a device;
* ``Tensor.tolist`` (not an aten op; patched for the duration of the block).

Each event is attributed to the innermost Python frame outside ``torch`` (the code that asked for
it), so a test can hold del_core to its budget while third-party code (transformers, DeepSpeed)
is reported separately.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = {
    "aten._local_scalar_dense.default": "item",
    "aten.is_nonzero.default": "item",
    "aten.equal.default": "item",
    "aten.nonzero.default": "nonzero",
    "aten.lift_fresh.default": "host->device",
}

_TORCH_ROOT = str(Path(torch.__file__).resolve().parent)
_THIS_FILE = str(Path(__file__).resolve())


@dataclass(frozen=True)
class SyncEvent:
    """One would-be sync: its kind ('item', 'nonzero', 'host->device', 'tolist'), the op, and the
    innermost non-torch frame ``file:line function`` that caused it."""

    kind: str
    op: str
    origin: str
    origin_file: str


@dataclass
class SyncLog:
    """The events of a counted block; :meth:`from_package` filters by the origin's path."""

    events: list[SyncEvent] = field(default_factory=list)

    def from_package(self, marker: str) -> list[SyncEvent]:
        """Events whose origin file path contains ``marker`` (e.g. ``"/del_core/"``)."""
        return [e for e in self.events if marker in e.origin_file]

    def summary(self, marker: str | None = None) -> str:
        """``count x kind at origin`` lines, most frequent first."""
        events = self.events if marker is None else self.from_package(marker)
        counts = Counter((e.kind, e.origin) for e in events)
        return "\n".join(f"{n} x {kind} at {origin}" for (kind, origin), n in counts.most_common()) or "(none)"


def _origin() -> tuple[str, str]:
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = str(Path(frame.filename).resolve()) if frame.filename and not frame.filename.startswith("<") else ""
        if path and (path.startswith(_TORCH_ROOT) or path == _THIS_FILE):
            continue
        return f"{frame.filename}:{frame.lineno} {frame.name}", path or frame.filename
    return "<unknown>", "<unknown>"


class _Counting(TorchDispatchMode):
    def __init__(self, log: SyncLog):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = SYNC_OPS.get(str(func))
        if kind is not None:
            origin, path = _origin()
            self.log.events.append(SyncEvent(kind, str(func), origin, path))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_host_syncs() -> Iterator[SyncLog]:
    """Within the block, record every would-be host sync (see the module docstring)."""
    log = SyncLog()
    original_tolist = torch.Tensor.tolist

    def counted_tolist(tensor: torch.Tensor):
        origin, path = _origin()
        log.events.append(SyncEvent("tolist", "Tensor.tolist", origin, path))
        return original_tolist(tensor)

    torch.Tensor.tolist = counted_tolist
    try:
        with _Counting(log):
            yield log
    finally:
        torch.Tensor.tolist = original_tolist


if __name__ == "__main__":  # pragma: no cover - a quick look: python tests/helpers/host_syncs.py
    with count_host_syncs() as demo:
        x = torch.arange(4)
        bool(x.any())
        x.tolist()
    print(demo.summary(), file=sys.stderr)
