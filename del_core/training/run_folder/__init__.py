"""The run's output folder (``run.output_dir``): the lock, the identity a resume must share, the
status file and the stop signals, the verified checkpoints, behind :class:`RunFolder`, the one
object the trainer holds."""

from .folder import RunFolder
from .status import StopRequest

__all__ = ["RunFolder", "StopRequest"]
