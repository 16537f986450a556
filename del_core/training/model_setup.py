"""The model side of a run's set-up: the tokenizer with its number vocabulary (which the loss may
need), and the causal LM it trains - in the engine's dtype and the run's attention kernel, loaded
as the engine needs it (:class:`del_core.engines.Backend`: ZeRO-3 partitions while loading,
Ulysses wraps the attention), with LoRA adapters when enabled, head counts checked for tensor
parallelism."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from del_core import DigitVocab, MultiDigitVocabularyError
from del_core.config import ConfigError
from del_core.engines import Backend
from del_core.losses import loss_needs
from del_core.models import (
    LoraSettings,
    LoraTargetError,
    attention_implementation,
    check_targets,
    hf_model,
    load_model,
    parameter_counts,
    resolve_model,
    resolve_tokenizer,
    wrap_with_lora,
)
from del_core.parallel import ParallelDims, check_head_counts
from del_core.tokenizers import CACHE_ROOT, load_tokenizer
from del_core.training.config import TrainConfig


@dataclass(frozen=True)
class RunTokenizer:
    """The tokenizer of a run and where the model and the tokenizer come from."""

    model_source: str  # what load_model reads: a Hugging Face folder or hub name
    source: str  # the tokenizer's: the model's, or model.tokenizer resolved
    tokenizer: Any
    pad_id: int  # the tokenizer's pad id, else its EOS id
    vocab: Optional[DigitVocab]  # None: the tokenizer has no number vocabulary (and the loss needs none)


def load_run_tokenizer(
    config: TrainConfig, ordered: AbstractContextManager, log: Callable[[str], None]
) -> RunTokenizer:
    """The tokenizer ``model.tokenizer`` (else the model's) names, resolved and loaded inside
    ``ordered`` (the trainer's :func:`del_core.parallel.local_main_first`: local rank 0 converts
    or downloads first). ConfigError without an EOS token, or when the loss needs a number
    vocabulary the tokenizer does not have."""
    model = config.model
    cache = Path(model.cache_dir) if model.cache_dir else CACHE_ROOT
    with ordered:
        model_source = resolve_model(model.name, cache)
        source = resolve_tokenizer(model.tokenizer, cache) if model.tokenizer else model_source
        tokenizer = load_tokenizer(source, cache / "tokenizers")
    if tokenizer.eos_token_id is None:
        raise ConfigError(f"tokenizer {source} has no EOS token")
    pad = tokenizer.pad_token_id
    pad_id = pad if pad is not None else tokenizer.eos_token_id
    vocab = number_vocabulary(tokenizer, str(source), config.loss.name, log)
    return RunTokenizer(model_source, source, tokenizer, pad_id, vocab)


def number_vocabulary(tokenizer: Any, name: str, loss: str, log: Callable[[str], None]) -> Optional[DigitVocab]:
    """The tokenizer's digit vocabulary; None when it has none and ``loss`` needs none
    (ConfigError when it does)."""
    try:
        vocab = DigitVocab.from_tokenizer(tokenizer, name=name)
    except MultiDigitVocabularyError as err:
        if loss_needs(loss).vocab:
            raise ConfigError(f"loss {loss} cannot score this tokenizer: {err}") from None
        log(f"[vocab] no number vocabulary ({err}); loss {loss} runs without digit metrics")
        return None
    log(f"[vocab] {vocab.describe()}")
    return vocab


@dataclass(frozen=True)
class TrainingModel:
    """The causal LM of a run, ready for its loss and its engine."""

    model: Any  # the Hugging Face model (with LoRA: the one inside peft_model)
    peft_model: Any  # the PEFT wrapper that writes the adapter with lora.enabled, else None
    dims: ParallelDims  # with the Ulysses group under parallel.sp > 1


def load_training_model(
    config: TrainConfig, source: str, backend: Backend, log: Callable[[str], None]
) -> TrainingModel:
    """The model ``source`` in ``backend``'s dtype, seeded with ``run.seed`` (LoRA's adapters and
    any new weights), loaded and wrapped as the engine needs (:meth:`Backend.begin_model_loading`,
    :meth:`Backend.wrap_model`); LoRA adapters with ``lora.enabled``; its head counts checked for
    ``parallel.tp``."""
    model_cfg = config.model
    if config.data.padding_free:
        check_joins_examples(source)
    torch.manual_seed(config.run.seed)
    backend.begin_model_loading()
    attn = attention_implementation(model_cfg.attn_implementation, backend.runtime.on_gpu)
    check_packed_attention(attn, config.data.packing, config.run.micro_batch_size)
    model = load_model(source, backend.model_dtype(), attn, model_cfg.gradient_checkpointing)
    log(
        f"[model] {source}: {type(model).__name__}, attention {attn}, gradient checkpointing "
        f"{'on' if model_cfg.gradient_checkpointing else 'off'}"
    )
    peft_model = None
    if config.lora.enabled:
        peft_model = _wrap_with_lora(model, config, log)
        model = hf_model(peft_model)
    if backend.dims.tp > 1:
        check_head_counts(model.config, backend.dims.tp)
    dims = backend.wrap_model(model, attn, config.run.micro_batch_size, log)
    return TrainingModel(model, peft_model, dims)


# Model types whose attention, run without an attention mask, keeps the examples of a row apart by
# their restarting position ids (eager and SDPA; tests/del_core/training/test_padding_free.py).
JOINED_EXAMPLE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def check_joins_examples(source: str) -> None:
    """ConfigError unless the model ``source`` (its config alone is read) is of a type verified to
    train on rows of joined examples (:data:`JOINED_EXAMPLE_MODEL_TYPES`), as data.padding_free makes them."""
    from transformers import AutoConfig

    model_type = AutoConfig.from_pretrained(source).model_type
    if model_type not in JOINED_EXAMPLE_MODEL_TYPES:
        raise ConfigError(
            f"data.padding_free=true: model type {model_type!r} of {source} is not verified to keep joined examples "
            f"apart (verified: {', '.join(JOINED_EXAMPLE_MODEL_TYPES)}); use data.padding_free=false"
        )


def check_packed_attention(attn: str, packing: bool, micro_batch_size: int) -> None:
    """ConfigError for packed rows under flash-attention in micro-batches of more than one row:
    transformers' flash-attention path reads packed examples from the position ids only when the
    batch is a single row (``_is_packed_sequence``); with more rows and no attention mask, each row
    would attend across its examples. (SDPA and eager build the block mask from the position ids
    for any batch; data.padding_free rows are single rows.)"""
    if packing and attn == "flash_attention_2" and micro_batch_size > 1:
        raise ConfigError(
            f"data.packing=true with attention flash_attention_2 and run.micro_batch_size={micro_batch_size}: "
            "flash-attention keeps packed examples apart only in one-row micro-batches; set "
            "run.micro_batch_size=1 (the same global batch through accumulation) or model.attn_implementation=sdpa"
        )


def output_vocab_size(model: Any) -> int:
    """The logit columns of a causal LM: its LM head's ``out_features`` (the module's full size,
    also while ZeRO-3 partitions the weight), else the text config's ``vocab_size``."""
    size = getattr(model.get_output_embeddings(), "out_features", None)
    return int(size if size is not None else model.config.get_text_config().vocab_size)


def _wrap_with_lora(model: Any, config: TrainConfig, log: Callable[[str], None]) -> Any:
    """``model`` wrapped by PEFT with LoRA adapters on ``lora.target_modules``, base weights frozen."""
    lora = config.lora
    settings = LoraSettings(lora.r, lora.alpha, lora.dropout, tuple(lora.target_modules))
    try:
        wrapped = check_targets(model, settings.target_modules)
    except LoraTargetError as err:
        raise ConfigError(str(err)) from None
    peft_model = wrap_with_lora(model, settings, config.run.seed, config.model.gradient_checkpointing)
    trainable, total = parameter_counts(hf_model(peft_model))
    log(
        f"[lora] {settings.describe()}: {len(wrapped)} layers; trainable parameters {trainable:,} of "
        f"{total:,} ({100 * trainable / total:.3f}%)"
    )
    return peft_model
