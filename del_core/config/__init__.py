"""One configuration mechanism for every entry point: OmegaConf structured configs.

A schema is a dataclass (nested dataclasses for sections). A run's configuration is the schema's
defaults, then a YAML recipe (which may name a ``base:`` recipe it extends), then ``key=value``
overrides (dotted for nested keys, ``loss.weight=0.1``). Errors name the key and where it came from.

    from del_core.config import load_config, split_command_line
    recipe, overrides = split_command_line(sys.argv[1:])
    config = load_config(TrainConfig, recipe, overrides, aliases=TRAIN_ALIASES)
"""

from .checks import check_at_least, check_choice, dotted_values
from .command_line import HELP_FLAGS, keys_help, option, split_command_line
from .deprecation import REMOVED_IN, REMOVED_IN_NEXT, warn_deprecated
from .loader import (
    ConfigError,
    KeyAliases,
    config_to_dict,
    config_to_yaml,
    load_config,
    placed_keys,
    read_yaml_mapping,
)

__all__ = [
    "HELP_FLAGS",
    "REMOVED_IN",
    "REMOVED_IN_NEXT",
    "ConfigError",
    "check_at_least",
    "check_choice",
    "KeyAliases",
    "config_to_dict",
    "config_to_yaml",
    "dotted_values",
    "keys_help",
    "load_config",
    "option",
    "placed_keys",
    "read_yaml_mapping",
    "split_command_line",
    "warn_deprecated",
]
