"""How much memory one rank needs to train a decoder LM on long sequences: a formula.

    python recipes/memory_estimate.py recipes/configs/qwen2.5-7b-long-traces.yaml

:func:`estimate` adds up, for one rank, the tensors a training step keeps (the per-rank share of
weights, gradients and optimizer state under ZeRO; the activations the forward saves for the
backward; the loss's buffers) for a Qwen2 / Llama-architecture model (:class:`ModelShape`) trained
on sequences of ``seq_len`` tokens with ``sp``-way DeepSpeed Ulysses sequence parallelism
(:class:`TrainShape`). Each term is an inventory of the tensors Hugging Face's decoder layer and the
del_core losses allocate (listed in the docstrings of the functions below), counted at small shapes
on the CPU with ``tests/bench/live_bytes.py`` (every tensor storage, forward and backward) and
checked against whole training steps by ``tests/bench/sequence_parallel_memory.py``.

Units: bytes; ``b`` is the bytes of the compute dtype (2 for bf16, 4 for fp32); ``t`` the tokens
one rank holds, micro-batch x seq_len / sp. The attention kernel is a flash kernel (flash-attention
on GPU, sdpa's flash kernel on CPU): it keeps O(t) bytes, never the [T, T] scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from del_core.losses.loss_path import LOSS_PATHS

if TYPE_CHECKING:
    from del_core.training.config import TrainConfig

# Per-token statistics the losses keep (log-sum-exp, CE, digit logits and their gradients),
# measured as ~110 bytes per token at the reduced shapes of tests/bench/chunked_loss.py.
LOSS_PER_TOKEN_BYTES = 112
# The dense loss from logits: the [t, V] logits and one fp32 [t, V] buffer (log-softmax / gradient)
# alive together at its peak (measured 8.00 bytes per token and vocabulary row in fp32, 7.7-7.9 in bf16).
LOGITS_PATH_BYTES_PER_ENTRY = 8
FP32 = 4
# DeepSpeed ZeRO-3 limits of ds_configs/zero3.json (elements): parameters gathered at once, and the
# gradient bucket reduced at once.
ZERO3_MAX_LIVE_PARAMETERS = 1_000_000_000
ZERO3_REDUCE_BUCKET = 500_000_000


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer of the Llama / Qwen2 family (RMSNorm, rotary positions, grouped-query
    attention, SwiGLU MLP)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: Optional[int] = None  # default hidden // heads
    qkv_bias: bool = False  # Qwen2: True
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("hidden", "intermediate", "layers", "heads", "kv_heads", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelShape.{name} must be >= 1, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"ModelShape: heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        return self.heads * self.dim_per_head

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.dim_per_head

    @property
    def parameters(self) -> int:
        """Number of parameters (embeddings, layers, final norm, LM head unless tied)."""
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        layer = attention + 3 * h * self.intermediate + 2 * h
        embeddings = self.vocab * h * (1 if self.tied_embeddings else 2)
        return embeddings + self.layers * layer + h

    @classmethod
    def from_hf_config(cls, config: Any) -> ModelShape:
        """From a Hugging Face ``config.json`` (a dict or a ``PretrainedConfig``)."""
        get = config.get if isinstance(config, dict) else (lambda key, default=None: getattr(config, key, default))
        heads = get("num_attention_heads")
        return cls(
            hidden=get("hidden_size"),
            intermediate=get("intermediate_size"),
            layers=get("num_hidden_layers"),
            heads=heads,
            kv_heads=get("num_key_value_heads") or heads,
            vocab=get("vocab_size"),
            head_dim=get("head_dim"),
            qkv_bias=bool(get("attention_bias", False)) or get("model_type") == "qwen2",
            tied_embeddings=bool(get("tie_word_embeddings", False)),
        )


# The shapes of the recipes' hub models (their config.json), so that an estimate needs no download.
KNOWN_MODELS = {
    "Qwen/Qwen2.5-1.5B": ModelShape(1536, 8960, 28, 12, 2, 151936, qkv_bias=True, tied_embeddings=True),
    "Qwen/Qwen2.5-7B": ModelShape(3584, 18944, 28, 28, 4, 152064, qkv_bias=True),
    "deepseek-ai/deepseek-math-7b-instruct": ModelShape(4096, 11008, 30, 32, 32, 102400),
    "mistralai/Mistral-7B-v0.1": ModelShape(4096, 14336, 32, 32, 8, 32000),
    "codellama/CodeLlama-7b-hf": ModelShape(4096, 11008, 32, 32, 32, 32016),
}


def model_shape_of(name: str) -> ModelShape:
    """The shape of ``model.name``: its folder's config.json, or :data:`KNOWN_MODELS` for a hub name
    (nothing is downloaded); ValueError names the model otherwise."""
    config = Path(name).expanduser() / "config.json"
    if config.is_file():
        return ModelShape.from_hf_config(json.loads(config.read_text()))
    if name in KNOWN_MODELS:
        return KNOWN_MODELS[name]
    raise ValueError(f"model.name {name}: no config.json there and not one of {', '.join(KNOWN_MODELS)}")


@dataclass(frozen=True)
class TrainShape:
    """How one optimizer micro-step runs: sequence length, parallel layout, dtype, memory savers."""

    seq_len: int
    micro_batch: int = 1
    sp: int = 1  # Ulysses sequence-parallel degree
    world: int = 1  # all ranks (ZeRO partitions over all of them)
    dtype_bytes: int = 2  # 2: bf16, 4: fp32
    gradient_checkpointing: bool = True
    loss_path: str = "chunked"
    chunk_size: int = 256
    zero_stage: int = 3

    def __post_init__(self) -> None:
        if self.loss_path not in LOSS_PATHS:
            raise ValueError(f"TrainShape.loss_path must be one of {', '.join(LOSS_PATHS)}, got {self.loss_path!r}")
        if self.dtype_bytes not in (2, 4):
            raise ValueError(f"TrainShape.dtype_bytes must be 2 (bf16) or 4 (fp32), got {self.dtype_bytes}")
        if self.zero_stage not in (2, 3):
            raise ValueError(f"TrainShape.zero_stage must be 2 or 3, got {self.zero_stage}")
        if self.sp < 1 or self.world % self.sp:
            raise ValueError(f"TrainShape: sp {self.sp} must be >= 1 and divide world {self.world}")
        if self.seq_len % self.sp:
            raise ValueError(f"TrainShape: seq_len {self.seq_len} is not a multiple of sp {self.sp}")

    @property
    def tokens_per_rank(self) -> int:
        return self.micro_batch * self.seq_len // self.sp


def train_shape_of(config: TrainConfig, world: int, sp: Optional[int] = None) -> TrainShape:
    """The :class:`TrainShape` of a training recipe on ``world`` GPUs (bf16 unless model.precision
    is fp32; sequences of data.max_length tokens padded to a multiple of sp; ``sp`` default
    parallel.sp)."""
    sp = config.parallel.sp if sp is None else sp
    return TrainShape(
        seq_len=-(-config.data.max_length // sp) * sp,
        micro_batch=config.run.micro_batch_size,
        sp=sp,
        world=world,
        dtype_bytes=4 if config.model.precision == "fp32" else 2,
        gradient_checkpointing=config.model.gradient_checkpointing,
        loss_path=config.loss.path,
        chunk_size=config.loss.chunk_size,
        zero_stage=config.parallel.zero_stage,
    )


@dataclass(frozen=True)
class MemoryEstimate:
    """One rank's memory, in bytes. ``activation_peak`` is what a step adds on top of the model
    state: ``saved_activations + max(loss_peak, backward_working_set)``. (The LM-head weight
    gradient is part of ``loss_peak``; once the loss's backward has returned it, it is accumulated
    into the gradient buffers counted in ``gradients``.)"""

    tokens_per_rank: int
    weights: int
    gradients: int
    optimizer_states: int
    zero3_buffers: int  # gathered parameters and the gradient bucket in flight (upper bounds)
    saved_activations: int  # what the forward keeps for the backward, all layers
    loss_peak: int  # the loss's own buffers at its peak
    backward_working_set: int  # the recomputed layer (checkpointing) and the MLP backward's gradients

    @property
    def model_state(self) -> int:
        return self.weights + self.gradients + self.optimizer_states + self.zero3_buffers

    @property
    def activation_peak(self) -> int:
        return self.saved_activations + max(self.loss_peak, self.backward_working_set)

    @property
    def total(self) -> int:
        return self.model_state + self.activation_peak

    def rows(self) -> list[tuple[str, int]]:
        """(name, bytes) for printing, the parts then the totals."""
        names = (
            "weights",
            "gradients",
            "optimizer_states",
            "zero3_buffers",
            "saved_activations",
            "loss_peak",
            "backward_working_set",
            "model_state",
            "activation_peak",
            "total",
        )
        return [(name, getattr(self, name)) for name in names]


def norm_bytes_per_token(model: ModelShape, b: int) -> int:
    """One RMSNorm: its input as fp32 (the input itself in fp32, an fp32 copy below it), the
    normalised input and the output in the compute dtype, and 1 / rms in fp32."""
    return FP32 * model.hidden + 2 * b * model.hidden + FP32


def layer_bytes_per_token(model: ModelShape, b: int, sp: int = 1) -> int:
    """What one decoder layer saves for its backward, per token of this rank.

    Two norms (:func:`norm_bytes_per_token`; the first one's input is the previous layer's output);
    the rotated query; key and value (on ``heads / sp`` heads of the whole sequence under Ulysses,
    with key/value heads repeated when sp > kv_heads); the attention output and its fp32
    log-sum-exp per head; the MLP's gate, up, SiLU(gate) and product ([t, intermediate] each).
    Under sp > 1 the attention output comes back from the all-to-all as a new [t, q_dim] tensor
    that the output projection keeps, besides the kernel's own output.
    """
    local_kv_heads = model.kv_heads / sp if model.kv_heads >= sp else 1
    kv = 2 * b * round(sp * local_kv_heads * model.dim_per_head)
    attention = b * model.q_dim + kv + b * model.q_dim + FP32 * model.heads
    if sp > 1:
        attention += b * model.q_dim
    return 2 * norm_bytes_per_token(model, b) + attention + 4 * b * model.intermediate


def rotary_bytes_per_token(model: ModelShape, b: int) -> int:
    """cos and sin of the rotary embedding, shared by every layer."""
    return 2 * b * model.dim_per_head


def saved_activation_bytes(model: ModelShape, train: TrainShape) -> int:
    """The forward's saved tensors on one rank: every layer's (without checkpointing) or every
    layer's input (with it), plus the final norm and the rotary tables."""
    b, t = train.dtype_bytes, train.tokens_per_rank
    if train.gradient_checkpointing:
        layers = model.layers * b * model.hidden
    else:
        layers = model.layers * layer_bytes_per_token(model, b, train.sp)
    return t * (layers + norm_bytes_per_token(model, b) + rotary_bytes_per_token(model, b))


def backward_working_set_bytes(model: ModelShape, train: TrainShape) -> int:
    """On top of the saved tensors at the backward's peak (in the last layer's MLP): the two
    [t, intermediate] gradients of its backward, and with checkpointing the layer's recomputed
    activations, while the final norm's tensors are already freed."""
    b, t = train.dtype_bytes, train.tokens_per_rank
    mlp = 2 * b * model.intermediate
    if not train.gradient_checkpointing:
        return t * mlp
    return t * (layer_bytes_per_token(model, b, train.sp) + mlp - norm_bytes_per_token(model, b))


def loss_peak_bytes(model: ModelShape, train: TrainShape) -> int:
    """The loss's buffers at its peak on one rank's ``t`` tokens.

    logits: the [t, V] logits and one fp32 [t, V] buffer (the LM-head weight gradient comes later,
    in the head's backward, when they are freed); chunked (docs/results/performance.md, "Memory of
    the chunked path"): the weight and hidden gradients, the larger of one chunk's fp32 logits (with
    their gradient cast below fp32) and the backward's [t, H] product; both plus the per-token
    statistics.
    """
    t, v = train.tokens_per_rank, model.vocab
    if train.loss_path == "logits":
        return t * v * LOGITS_PATH_BYTES_PER_ENTRY + t * LOSS_PER_TOKEN_BYTES
    return chunked_loss_peak_bytes(t, v, model.hidden, min(train.chunk_size, t), train.dtype_bytes)


def chunked_loss_peak_bytes(tokens: int, vocab: int, hidden: int, chunk: int, dtype_bytes: int) -> int:
    """Peak extra bytes of the chunked loss (``from_hidden`` + backward, any plain-CE loss: MLE,
    DEL, NTL, DIST2) on ``tokens`` hidden states [tokens, hidden] and an LM-head weight
    [vocab, hidden] of ``dtype_bytes`` per element: the weight and hidden gradients (alive from the
    forward to the backward), the larger of one chunk's transient (fp32 logits and, below fp32,
    their gradient cast to the weight's dtype) and the backward's [tokens, hidden] digit-term
    product, and the per-token statistics. Checked against exact measurements by
    ``tests/bench/chunked_loss.py --memory-model`` (docs/results/performance.md)."""
    b = dtype_bytes
    transient = chunk * vocab * (FP32 + (b if b != FP32 else 0))
    return (vocab * hidden + tokens * hidden) * b + max(transient, tokens * hidden * b) + tokens * LOSS_PER_TOKEN_BYTES


def model_state_bytes(model: ModelShape, train: TrainShape) -> tuple[int, int, int, int]:
    """(weights, gradients, optimizer states, ZeRO-3 buffers) on one rank: weights and gradients in
    the compute dtype, AdamW's two fp32 moments plus an fp32 master copy below fp32. ZeRO-2
    partitions gradients and optimizer states over ``world``; ZeRO-3 the weights too, and gathers
    up to ``stage3_max_live_parameters`` of them at a time and reduces gradients in buckets of
    ``reduce_bucket_size`` (ds_configs/zero3.json: upper bounds)."""
    p, b, w = model.parameters, train.dtype_bytes, train.world
    optimizer = p * (2 * FP32 + (FP32 if b != FP32 else 0))
    weights = p * b // w if train.zero_stage == 3 else p * b
    buffers = 0
    if train.zero_stage == 3 and w > 1:
        buffers = (min(p, ZERO3_MAX_LIVE_PARAMETERS) + min(p, ZERO3_REDUCE_BUCKET)) * b
    return weights, p * b // w, optimizer // w, buffers


def estimate(model: ModelShape, train: TrainShape) -> MemoryEstimate:
    """One rank's memory for ``model`` trained as ``train`` (see the module docstring)."""
    weights, gradients, optimizer, buffers = model_state_bytes(model, train)
    return MemoryEstimate(
        tokens_per_rank=train.tokens_per_rank,
        weights=weights,
        gradients=gradients,
        optimizer_states=optimizer,
        zero3_buffers=buffers,
        saved_activations=saved_activation_bytes(model, train),
        loss_peak=loss_peak_bytes(model, train),
        backward_working_set=backward_working_set_bytes(model, train),
    )
