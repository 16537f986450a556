"""Predict one rank's memory for a training recipe (del_core/memory_model.py; docs/long_traces.md).

    python recipes/memory_estimate.py recipes/configs/qwen2.5-7b-long-traces.yaml world=16
    python recipes/memory_estimate.py recipes/configs/qwen2.5-7b.yaml world=8 data.max_length=8192

``world`` is the number of GPUs (default 8); any other ``key=value`` overrides the recipe. The model
shape comes from the model folder's config.json, or for the recipes' hub models from a built-in
table (nothing is downloaded). bf16 unless model.precision=fp32. Prints the parts for the recipe's
parallel.sp, then the totals for every sp the model's heads allow.
"""

import sys

from del_core.config import HELP_FLAGS, ConfigError, keys_help, split_command_line
from del_core.console import filter_known_warnings
from del_core.memory_model import estimate, model_shape_of, train_shape_of
from del_core.parallel import sequence_head_problem
from del_core.training import TrainConfig, load_train_config

filter_known_warnings()

GB = 1e9


def main(argv: list[str]) -> int:
    if argv and argv[0] in HELP_FLAGS:
        print(f"{__doc__}\nKeys: world=8 and the training keys (key=value):\n{keys_help(TrainConfig)}")
        return 0
    try:
        recipe, overrides = split_command_line(argv)
        world = int(next((o.split("=", 1)[1] for o in overrides if o.startswith("world=")), 8))
        config = load_train_config(recipe, [o for o in overrides if not o.startswith("world=")])
        model, train = model_shape_of(config.model.name), train_shape_of(config, world)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{config.model.name}: {model.parameters / 1e9:.2f}B parameters; {train}")
    for name, value in estimate(model, train).rows():
        print(f"  {name:<22} {value / GB:8.2f} GB")
    print(f"per-rank total for each sp the heads allow (world {world}):")
    for sp in (s for s in (1, 2, 4, 8, 16) if world % s == 0):
        if sequence_head_problem(model.heads, model.kv_heads, sp):
            continue
        print(f"  sp={sp:<3} {estimate(model, train_shape_of(config, world, sp)).total / GB:8.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
