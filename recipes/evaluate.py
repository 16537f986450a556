"""Zero-shot evaluation of a model on the seven math benchmarks of the DEL paper.

    python recipes/evaluate.py MODEL [benchmarks=gsm8k,svamp|all] [limit=N] [data_dir=DIR]
           [output_dir=OUT] [backend=auto|vllm|hf] [tp=N] [batch_size=N] [key=value ...]
    python recipes/evaluate.py smollm2 benchmarks=gsm8k limit=8
    python recipes/evaluate.py score_only=PRED.jsonl output=OUT.jsonl [data_dir=DIR]

MODEL: an HF directory, a training output directory (its final/), a .gguf file, smollm2 or a hub
name. DIR (default $DEL_BENCHMARK_DIR, else the repository's data/benchmarks) holds gsm8k/, math/,
svamp/, simuleq/, aqua/, sat/, mmlu_mathematics/. What is written:
del_core/evaluation/benchmarks/runner.py; the protocol: del_core/evaluation/benchmarks/zero_shot.py.
Bad input: one `error: ...` line on stderr, exit status 2.
"""

import sys

from del_core.config import ConfigError
from del_core.console import filter_known_warnings
from del_core.evaluation.benchmarks.config import load_eval_config, options_help
from del_core.evaluation.benchmarks.runner import EvaluationError, run

filter_known_warnings()


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(f"{__doc__}\nKeys (key=value; a YAML file of them may replace MODEL):\n{options_help()}")
        return 0
    try:
        return run(load_eval_config(argv))
    except (ConfigError, EvaluationError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
