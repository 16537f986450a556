"""The options of ``recipes/evaluate.py``, on the project's one configuration mechanism.

Every option is also a ``--flag value`` (dashes read as underscores) or ``key=value``; the first
bare argument is the model (or a YAML file of these keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from del_core.config import ConfigError, load_config, split_command_line
from del_core.models.sources import ModelSourceError, check_model_source


@dataclass
class EvalConfig:
    model: Optional[str] = None  # HF directory, training output directory (its final/), .gguf, smollm2, hub name
    data_dir: Optional[str] = None  # benchmark directory; default $DEL_BENCHMARK_DIR
    benchmarks: str = "all"  # comma list of benchmark names, or all
    limit: Optional[int] = None  # the first N questions of each benchmark
    output_dir: Optional[str] = None  # default: OUTPUT_DIR/eval for a training output, else eval/<model name>
    backend: str = "auto"  # auto (vLLM when it imports and a GPU is present), vllm, hf
    tp: int = 1  # vLLM tensor-parallel size
    batch_size: int = 8  # HF generate batch size
    max_new_tokens: int = 512
    dtype: str = "auto"  # auto (bf16 on GPU, fp32 on CPU), bfloat16, float16, float32
    threads: Optional[int] = None  # torch CPU threads
    workers: int = 4  # programs run at once in the sandbox
    program_seconds: float = 10.0  # wall-clock limit of one generated program
    program_cpu_seconds: int = 5  # CPU-time limit of one generated program
    score_only: Optional[str] = None  # PRED.jsonl: re-score saved outputs without a model
    output: Optional[str] = None  # OUT.jsonl: the scored rows of score_only

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "vllm", "hf"):
            raise ConfigError(f"backend must be auto, vllm or hf, got {self.backend!r}")
        for name in ("tp", "batch_size", "max_new_tokens", "workers", "program_cpu_seconds"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1, got {self.limit}")
        if self.score_only is None and self.model is None:
            raise ConfigError("give MODEL (or --score-only PRED.jsonl)")
        if self.score_only is not None and self.output is None:
            raise ConfigError("--score-only needs --output OUT.jsonl")
        if self.model is not None:
            try:
                check_model_source(self.model)
            except ModelSourceError as err:
                raise ConfigError(str(err)) from None


def load_eval_config(argv: Sequence[str]) -> EvalConfig:
    """The configuration of ``recipes/evaluate.py MODEL [--flag value | key=value ...]``."""
    first, overrides = split_command_line(argv)
    recipe = None
    if first is not None and first.endswith((".yaml", ".yml")):
        recipe = first
    elif first is not None:
        overrides = [f"model={first}", *overrides]
    return load_config(EvalConfig, recipe, overrides)
