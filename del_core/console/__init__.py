"""What an entry script shows on the terminal: its own lines, not the dependencies' known noise.

known_warnings: the third-party deprecation warnings an entry script hides, by category and module.
"""

from .known_warnings import KNOWN_WARNINGS, KnownWarning, filter_known_warnings

__all__ = ["KNOWN_WARNINGS", "KnownWarning", "filter_known_warnings"]
