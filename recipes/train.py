"""Fine-tune a Hugging Face causal LM with a del_core loss (DeepSpeed ZeRO-2/3, FSDP2 or DDP: parallel.engine).

    python recipes/train.py [RECIPE.yaml] [key=value ...]            # one process (CPU or one GPU)
    torchrun --nproc_per_node 8 recipes/train.py recipes/configs/qwen2.5-1.5b.yaml loss=mle loss.weight=
    python recipes/train.py recipes/configs/tiny.yaml                 # the CPU main job (make train)
    torchrun --nproc_per_node 8 recipes/train.py RECIPE.yaml parallel.sp=4  # long sequences: Ulysses, 1/4 per rank

Keys: del_core/training/config.py (dotted for nested keys: loss.weight=0.1, run.max_steps=100).
Outputs in run.output_dir: metrics.jsonl (schema: del_core/training/records.py), tensorboard/,
checkpoints/step_NNNNNN/ (run.resume=auto picks the newest complete one), final/ (Hugging Face
safetensors + tokenizer, loadable with from_pretrained).
"""

import sys

from del_core.config import HELP_FLAGS, ConfigError, keys_help, split_command_line
from del_core.console import filter_known_warnings
from del_core.data import DataError
from del_core.models import ModelSourceError
from del_core.parallel import ParallelLayoutError, destroy, exit_process
from del_core.training import TrainConfig, load_train_config, run

filter_known_warnings()


def main(argv: list[str]) -> int:
    if argv and argv[0] in HELP_FLAGS:
        print(f"{__doc__}\nKeys (key=value, defaults shown):\n{keys_help(TrainConfig)}")
        return 0
    try:
        recipe, overrides = split_command_line(argv)
        run(load_train_config(recipe, overrides))
    except (ConfigError, DataError, ModelSourceError, ParallelLayoutError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    finally:
        destroy()
    return 0


if __name__ == "__main__":
    exit_process(main(sys.argv[1:]))
