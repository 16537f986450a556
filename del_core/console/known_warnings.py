"""The third-party warnings an entry script hides: deprecations inside a dependency that a user of
del_core cannot act on, each matched by its category AND the module that raises it.

    from del_core.console import filter_known_warnings
    filter_known_warnings()        # once, in an entry script (recipes/*.py), after its imports

Everything else still shows: the warnings of del_core itself (a renamed configuration key's
FutureWarning), other categories from the same modules (a DeepSpeed ``UserWarning``), and every
warning of every other module. Processes started as the same entry script (torchrun's ranks, a
``spawn`` child that re-imports the main module) run the call too; ``fork`` children inherit it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownWarning:
    """One filter: warnings of ``category`` (or a subclass) raised from a module whose dotted name
    matches the regular expression ``module`` from its start, with a message matching ``message``
    from its start, case-insensitively ("" = any message). ``reason``: why it is safe to hide."""

    category: type[Warning]
    module: str
    message: str
    reason: str


# A module pattern ends at a dot or the end of the name: "deepspeed" must not match "deepspeed_x".
_DEEPSPEED = r"deepspeed(\.|$)"

KNOWN_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        FutureWarning,
        r"torch\.distributed(\.|$)",
        r"`torch\.distributed\.[\w.]+` (is deprecated|is a private function)",
        "DeepSpeed's ZeRO calls all_gather_into_tensor / reduce_scatter_tensor on every step; torch "
        "attributes the warning to its own wrapper (c10d_logger), once per step. del_core.parallel "
        "uses the current API.",
    ),
    KnownWarning(
        FutureWarning,
        _DEEPSPEED,
        "",
        "deprecated torch APIs that DeepSpeed calls, attributed to DeepSpeed's modules (on CUDA builds "
        "torch.cuda.amp.custom_fwd/custom_bwd, at import).",
    ),
    KnownWarning(
        FutureWarning,
        r"transformers\.training_args$",
        r"`gradient_checkpointing` is deprecated",
        "TRL's configurations (SFTConfig) default gradient_checkpointing=True, the name transformers 5 "
        "renamed activation_checkpointing: every TRL run warns although its user set nothing.",
    ),
)


def filter_known_warnings() -> None:
    """Install an ``ignore`` filter for each of :data:`KNOWN_WARNINGS` in this process (idempotent:
    a second call replaces the same filters instead of adding copies)."""
    for known in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=known.message, category=known.category, module=known.module)
