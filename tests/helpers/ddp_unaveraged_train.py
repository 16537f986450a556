"""recipes/train.py with a broken DDP engine, for the test that must see the difference: the
trainer's losses are not multiplied by the rank count DDP averages the gradients over, so the
update follows the mean over ranks instead of the sum (the gradients are 1/ranks of the right ones)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from del_core.engines.ddp import DDPBackend

DDPBackend.gradient_divisor = property(lambda self: 1)
sys.argv = [str(Path(__file__).resolve().parents[2] / "recipes" / "train.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
