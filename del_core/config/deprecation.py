"""The one form of a deprecation warning (the policy: docs/development.md#deprecation-policy).

A name deprecated in a release lives one more minor release: it keeps working, with the new
behaviour, and warns with a ``FutureWarning`` naming its replacement and the release that removes it:
:data:`REMOVED_IN` for what 0.3 deprecated, :data:`REMOVED_IN_NEXT` for what the next minor release
(0.4, unreleased) deprecates.
"""

from __future__ import annotations

import warnings

REMOVED_IN = "0.4"  # the release that removes what 0.3 deprecated
REMOVED_IN_NEXT = "0.5"  # the release that removes what 0.4 deprecates


def warn_deprecated(old: str, new: str, stacklevel: int = 2, removed_in: str = REMOVED_IN) -> None:
    """``FutureWarning``: ``OLD is deprecated and will be removed in REMOVED_IN; use NEW``;
    ``stacklevel`` as in :func:`warnings.warn`, counted from the caller of this function."""
    warnings.warn(
        f"{old} is deprecated and will be removed in {removed_in}; use {new}", FutureWarning, stacklevel=stacklevel + 1
    )
