"""Zero-shot evaluation on the seven math benchmarks of the DEL paper.

    python recipes/evaluate.py MODEL --data-dir DIR [--benchmarks gsm8k,svamp|all] [--limit N]
                               [--backend auto|vllm|hf] [--tp N] [--batch-size N] [--max-new-tokens N]
    python recipes/evaluate.py --score-only PRED.jsonl --data-dir DIR --output OUT.jsonl

MODEL: an HF directory, a training output directory (its final/), a .gguf file, smollm2 or a hub
name. DIR (default $DEL_BENCHMARK_DIR) holds gsm8k/, math/, svamp/, simuleq/, aqua/, sat/,
mmlu_mathematics/. Options: del_core/evaluation/config.py (also as key=value); what is written:
del_core/evaluation/runner.py; the protocol: del_core/evaluation/protocol.py.
"""

import sys

from del_core.config import ConfigError
from del_core.evaluation.benchmarks import BenchmarkError
from del_core.evaluation.config import load_eval_config
from del_core.evaluation.runner import run


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        return run(load_eval_config(argv))
    except (ConfigError, BenchmarkError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
