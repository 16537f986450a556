"""The sandbox check before a benchmark run: only a run that may execute generated programs needs it.

An open-ended benchmark's output may be a program, which the evaluator runs in the sandbox; a
multiple-choice benchmark's output never is. So the check, and with it the consent rule of
``sandbox=auto`` (:func:`del_core.evaluation.sandbox.harness.resolve_mode`), applies only where
one of the benchmarks is open-ended, and it runs before any model loads.
"""

from __future__ import annotations

from collections.abc import Iterable

from del_core.evaluation.question import OPEN_ENDED
from del_core.evaluation.sandbox.harness import resolve_mode


def check_sandbox(sandbox: str, benchmarks: Iterable[str]) -> None:
    """Resolve the sandbox mode ``sandbox`` (one of ``SANDBOX_MODES``) when one of
    ``benchmarks`` is open-ended; raises :class:`~del_core.evaluation.sandbox.SandboxUnavailable`
    where it refuses (bubblewrap cannot create namespaces and the weaker layer was not chosen)."""
    if any(name in OPEN_ENDED for name in benchmarks):
        resolve_mode(sandbox)
