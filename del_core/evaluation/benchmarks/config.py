"""The options of ``recipes/evaluate.py``, on the project's one configuration mechanism.

Every option is a ``key=value`` (the release-0.1 flags ``--key value`` still read, with a
deprecation warning); the first bare argument is the model, or a YAML file of these keys. Values
are checked here (:class:`del_core.config.ConfigError`), so bad input stops before anything is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from del_core.config import ConfigError, keys_help, load_config, option, split_command_line
from del_core.data.prompting import PROMPT_FORMATS
from del_core.models.sources import ModelSourceError, check_model_source

BACKENDS = ("auto", "vllm", "hf")
DTYPES = ("auto", "bfloat16", "float16", "float32")
SANDBOX_MODES = ("auto", "namespaces", "basic", "none")


@dataclass
class EvalConfig:
    """What to evaluate and how; see each field's help (:func:`options_help`)."""

    model: Optional[str] = option(
        None, "HF directory, training output directory (its final/), .gguf file, smollm2 or hub name", "MODEL"
    )
    data_dir: Optional[str] = option(
        None, "benchmark directory (default: $DEL_BENCHMARK_DIR, else the repository's data/benchmarks)", "DIR"
    )
    benchmarks: str = option("all", "comma list of gsm8k,math,svamp,simuleq,aqua,sat,mmlu_mathematics, or all", "LIST")
    limit: Optional[int] = option(None, "the first N questions of each benchmark", "N")
    output_dir: Optional[str] = option(
        None, "default: OUTPUT_DIR/eval for a training output, else eval/<model name>", "DIR"
    )
    backend: str = option("auto", "auto (vLLM when it imports and a GPU is present), vllm or hf", "NAME")
    tp: int = option(1, "vLLM tensor-parallel size", "N")
    batch_size: int = option(8, "HF generate batch size", "N")
    open_max_new_tokens: int = option(1500, "new tokens per open-ended answer at most (the release's)", "N")
    choice_max_new_tokens: int = option(2048, "new tokens per multiple-choice answer at most (the release's)", "N")
    max_new_tokens: Optional[int] = option(None, "sets both lengths above", "N")
    dtype: str = option("auto", "auto (bf16 on GPU, fp32 on CPU), bfloat16, float16 or float32", "NAME")
    prompt_format: str = option(
        "alpaca",
        "the prompts, as the model was trained (data.prompt_format): alpaca, or chat (its chat template)",
        "NAME",
    )
    system_prompt: Optional[str] = option(
        None,
        'chat only: the system turn the model was trained with (an empty one: system_prompt: "" in a YAML '
        "recipe); unset: the template's default",
        "TEXT",
    )
    threads: Optional[int] = option(None, "torch CPU threads", "N")
    workers: int = option(4, "generated programs run at once in the sandbox", "N")
    program_seconds: float = option(10.0, "wall-clock limit of one generated program", "S")
    program_cpu_seconds: int = option(5, "CPU-time limit of one generated program", "S")
    sandbox: str = option(
        "auto",
        "auto (namespaces where bubblewrap runs, else refuse unless DEL_SANDBOX_ACCEPT_BASIC=1), namespaces "
        "(bubblewrap), basic (the weaker layer, chosen on purpose) or none (no isolation: trusted programs only)",
        "MODE",
    )
    score_only: Optional[str] = option(None, "re-score the saved outputs of PRED.jsonl without a model", "PRED.jsonl")
    output: Optional[str] = option(None, "the scored rows of score_only", "OUT.jsonl")

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.prompt_format not in PROMPT_FORMATS:
            raise ConfigError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {self.prompt_format!r}")
        if self.system_prompt is not None and self.prompt_format != "chat":
            raise ConfigError("system_prompt needs prompt_format chat (an Alpaca prompt has no system turn)")
        if self.sandbox not in SANDBOX_MODES:
            raise ConfigError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, got {self.sandbox!r}")
        lengths = ("open_max_new_tokens", "choice_max_new_tokens")
        for name in ("tp", "batch_size", *lengths, "workers", "program_cpu_seconds"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.program_seconds <= 0:
            raise ConfigError(f"program_seconds must be > 0, got {self.program_seconds}")
        for name in ("limit", "threads", "max_new_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.score_only is None and self.model is None:
            raise ConfigError("give MODEL (or score_only=PRED.jsonl)")
        if self.score_only is not None and self.output is None:
            raise ConfigError("score_only needs output=OUT.jsonl")
        if self.score_only is None and self.model is not None:
            try:
                check_model_source(self.model)
            except ModelSourceError as err:
                raise ConfigError(str(err)) from None


def load_eval_config(argv: Sequence[str]) -> EvalConfig:
    """The configuration of ``recipes/evaluate.py [MODEL | RECIPE.yaml] [key=value ...]``;
    :class:`ConfigError` (one line, naming the key) for an unknown key or a bad value."""
    first, overrides = split_command_line(argv)
    recipe = None
    if first is not None and first.endswith((".yaml", ".yml")):
        recipe = first
    elif first is not None:
        overrides = [f"model={first}", *overrides]
    return load_config(EvalConfig, recipe, overrides)


def options_help() -> str:
    """One line per key of :class:`EvalConfig`: ``key=DEFAULT`` (or its placeholder) and what it means."""
    return keys_help(EvalConfig)
