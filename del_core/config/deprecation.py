"""The one form of a deprecation warning (the policy: docs/development.md#deprecation-policy).

A name deprecated in this release lives one more minor release: it keeps working, with the new
behaviour, and warns with a ``FutureWarning`` naming its replacement and :data:`REMOVED_IN`.
"""

from __future__ import annotations

import warnings

REMOVED_IN = "0.4"  # the release that removes what this release deprecates


def warn_deprecated(old: str, new: str, stacklevel: int = 2) -> None:
    """``FutureWarning``: ``OLD is deprecated and will be removed in 0.N+1; use NEW``;
    ``stacklevel`` as in :func:`warnings.warn`, counted from the caller of this function."""
    warnings.warn(
        f"{old} is deprecated and will be removed in {REMOVED_IN}; use {new}", FutureWarning, stacklevel=stacklevel + 1
    )
