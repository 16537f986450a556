"""The plain-PyTorch training loop: one process, no DeepSpeed, for small models on one device.

The project has two training loops: the DeepSpeed :class:`~del_core.training.Trainer` for real
fine-tuning, and this one, shared by the numeric benchmark (:mod:`del_core.experiments.numeric_bench.run_unit`:
hundreds of runs of a few-hundred-thousand-parameter model, where an engine's start-up alone would
dominate) and the loss demo (:mod:`del_core.demo.loss_demo`: a few CPU steps of a 135M model).

A step is AdamW on one batch: forward, the loss, backward, gradient clipping, the update. The
learning rate is constant, or the project's one warm-up cosine
(:func:`del_core.training.schedule.warmup_cosine_lr`). Importing this module does not import
DeepSpeed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.tokenized import TokenBatch
from del_core.losses import LossOutput, NumericLoss, build_loss_for_model
from del_core.training.schedule import warmup_cosine_lr
from del_core.vocab import DigitVocab


@dataclass(frozen=True)
class PlainLoopConfig:
    """``steps`` AdamW steps at peak learning rate ``lr``. ``warmup_steps`` None: the rate is
    constant; else linear warm-up over that many steps, then cosine decay to ``min_lr_ratio * lr``
    at ``steps``. Gradients are clipped to norm ``max_grad_norm``. A :class:`StepRecord` is kept at
    step 1, every ``log_every`` steps and the last step."""

    steps: int
    lr: float
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    warmup_steps: Optional[int] = None
    min_lr_ratio: float = 0.0
    log_every: int = 1


@dataclass(frozen=True)
class StepRecord:
    """One step's numbers on its batch (before the update): ``step`` 1-based, ``lr`` the rate it
    ran with, ``loss`` = ``ce`` + ``aux`` (nats), digit entropy (nats) and digit accuracy over the
    batch's digit targets (NaN where the loss has no digit vocabulary)."""

    step: int
    lr: float
    loss: float
    ce: float
    aux: float
    digit_entropy: float
    digit_acc: float


def make_loss(name: str, vocab: Optional[DigitVocab], weight: Optional[float], model: torch.nn.Module) -> NumericLoss:
    """The loss ``name`` (lambda ``weight``; None: its default) for training ``model``, given what it
    declares it needs (:func:`del_core.losses.build_loss_for_model`: a loss that needs the LM head
    gets a frozen copy of it at the current weights)."""
    loss = build_loss_for_model(name, vocab, weight, head_weight=lambda: model.get_output_embeddings().weight)
    return loss.to(model.get_output_embeddings().weight.device)


def make_optimizer(model: torch.nn.Module, config: PlainLoopConfig) -> torch.optim.Optimizer:
    """AdamW over all of ``model``'s parameters, at ``config.lr``."""
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=config.betas)


def learning_rate(config: PlainLoopConfig, step: int) -> float:
    """The learning rate of 0-based ``step`` under ``config``."""
    if config.warmup_steps is None:
        return config.lr
    return warmup_cosine_lr(step, config.steps, config.warmup_steps, config.lr, config.min_lr_ratio)


def logits_of(model: Any, batch: TokenBatch) -> torch.Tensor:
    """[B, T, V] logits of a causal LM on ``batch`` (padding masked by its attention mask)."""
    return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: NumericLoss,
    batch: TokenBatch,
    lr: float,
    max_grad_norm: float,
) -> LossOutput:
    """One update of ``model`` on ``batch`` at learning rate ``lr``; the loss output of the batch."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    out = loss_fn(logits_of(model, batch), batch.targets)
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return out


def _record(step: int, lr: float, out: LossOutput) -> StepRecord:
    nan = torch.tensor(float("nan"))
    return StepRecord(
        step=step,
        lr=lr,
        loss=out.loss.item(),
        ce=out.ce.item(),
        aux=out.aux.item(),
        digit_entropy=out.metrics.get("digit_entropy", nan).item(),
        digit_acc=out.metrics.get("digit_acc", nan).item(),
    )


def train(
    model: torch.nn.Module,
    loss_fn: NumericLoss,
    batch_at: Callable[[int], TokenBatch],
    config: PlainLoopConfig,
    on_record: Optional[Callable[[StepRecord], None]] = None,
) -> list[StepRecord]:
    """Train ``model`` in place for ``config.steps`` steps, step s on ``batch_at(s)`` (0-based, on
    the model's device); the kept :class:`StepRecord` list, each also passed to ``on_record``.
    The model is left in train mode."""
    optimizer = make_optimizer(model, config)
    model.train()
    records = []
    for step in range(config.steps):
        lr = learning_rate(config, step)
        loss_fn.set_step(step)
        out = train_step(model, optimizer, loss_fn, batch_at(step), lr, config.max_grad_norm)
        # Step 1 too: the ratio aux / CE at the start is what a lambda rule for new models reads.
        if step == 0 or (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            records.append(_record(step + 1, lr, out))
            if on_record is not None:
                on_record(records[-1])
    return records
