"""The sandbox: running generated programs in a separate, limited process.

``harness.py`` starts the process (bubblewrap namespaces, the basic layer or none; the wall clock,
the output caps, the group kill) and reads its result; ``child.py`` is the first code inside that
process (resource limits, the drop to an unprivileged user, the audit hook). Nothing of the project
is imported inside the sandbox: ``child.py`` runs as a file under ``python -I``.

Exports: :class:`SandboxLimits` (the limits and the mode), :class:`SandboxResult`,
:func:`run_program`, :func:`run_programs` (in parallel, results in order), :func:`resolve_mode`
(``auto`` to the mode that runs here), :func:`namespaces_available`, :class:`SandboxUnavailable`.
"""

from .harness import (
    MODES,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailable,
    namespaces_available,
    resolve_mode,
    run_program,
    run_programs,
)

__all__ = [
    "MODES",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "namespaces_available",
    "resolve_mode",
    "run_program",
    "run_programs",
]
