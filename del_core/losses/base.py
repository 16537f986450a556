"""The loss interface: validation, number spans, global normalisers and the result type.

A loss is ``CE-like token part + lambda * digit part``:

    loss = sum_t token_loss_t / num_tokens + weight * sum_i digit_term_i / num_digits

``num_tokens`` / ``num_digits`` are the global normalisers (non-ignored tokens and digit positions
over the whole accumulation window and all data-parallel ranks); by default they are counted in
this batch. With them, the sum of the losses of micro-batches equals the loss of the whole batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from ..spans import NumberSpans, number_spans
from ..vocab import DigitVocab
from .cross_entropy import IGNORE_INDEX, compute_dtype, cross_entropy_with_digit_logits
from .digit_terms import digit_entropy

Normaliser = Optional[Union[int, float, torch.Tensor]]


@dataclass
class LossOutput:
    """Result of a loss call.

    loss:    scalar, differentiable; ``loss == ce + aux``.
    ce:      scalar, differentiable; plain token cross-entropy, ``sum CE / num_tokens``.
    aux:     scalar, differentiable; everything the loss adds to CE (the lambda-weighted digit
             term, or for MixCE/EMO the difference between their token loss and CE).
    metrics: detached scalars over THIS batch: ``n_tokens``, ``n_digits``, ``digit_entropy``
             (nats, mean over digit positions, 0 when there are none), ``digit_acc``.
    """

    loss: torch.Tensor
    ce: torch.Tensor
    aux: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Batch:
    """A validated, flattened batch.

    logits:       [N, V] as given (any float dtype); ``dtype`` is the compute dtype.
    labels/valid: [N] int64 / bool.
    spans:        flattened :class:`NumberSpans` ([N] each), None without a vocabulary.
    digit_logits: [N, 10] in the compute dtype, zero outside digit positions; None without vocab.
    target_digit: [N] int64, the target digit at digit positions, 0 elsewhere.
    """

    logits: torch.Tensor
    labels: torch.Tensor
    valid: torch.Tensor
    dtype: torch.dtype
    spans: Optional[NumberSpans] = None
    digit_logits: Optional[torch.Tensor] = None
    target_digit: Optional[torch.Tensor] = None


class NumericLoss(torch.nn.Module):
    """Base of every loss. Subclasses implement :meth:`token_part` and/or :meth:`digit_part`.

    ``validate`` (default True) checks label ids and the finiteness of the result; each check costs
    one host-device synchronisation per call.
    """

    name = "base"
    needs_vocab = False

    def __init__(self, vocab: Optional[DigitVocab], weight: float = 0.0, validate: bool = True):
        super().__init__()
        if vocab is None and self.needs_vocab:
            raise ValueError(f"loss {self.name!r} needs a DigitVocab (its auxiliary term scores digits)")
        if vocab is not None and vocab.multi_digit:
            raise ValueError(f"loss {self.name!r}: vocabulary {vocab.name!r} is multi-digit")
        self.vocab = vocab
        self.weight = float(weight)
        self.validate = validate

    # --- hooks for subclasses -------------------------------------------------------------
    def token_part(self, batch: Batch, ce: torch.Tensor) -> Optional[torch.Tensor]:
        """Per-token loss [N] replacing CE, or None to use CE itself."""
        return None

    def digit_part(self, batch: Batch) -> Optional[torch.Tensor]:
        """Per-position auxiliary term [N] (only digit positions are summed), or None."""
        return None

    # --- the interface ---------------------------------------------------------------------
    def forward(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
    ) -> LossOutput:
        """``logits`` [..., T, V] of any float dtype, ``labels`` [..., T] int64 (-100 = ignored),
        aligned position by position (the caller shifts). Returns a :class:`LossOutput`."""
        batch = self._prepare(logits, labels)
        dtype = batch.dtype
        digit_ids = self.vocab.digit_tensor(logits.device) if self.vocab is not None else None
        ce_t, digit_logits = cross_entropy_with_digit_logits(batch.logits, batch.labels, digit_ids)
        if digit_logits is not None:
            # Zeros outside digit positions keep masked-out terms (and their gradients) finite
            # even where the logits hold -inf (masked vocabulary entries).
            batch.digit_logits = torch.where(batch.spans.is_digit.unsqueeze(-1), digit_logits, 0.0)
        n_tokens = batch.valid.sum()
        is_digit = batch.spans.is_digit if batch.spans is not None else None
        n_digits = is_digit.sum() if is_digit is not None else torch.zeros_like(n_tokens)
        if self.validate:
            self._check_normalisers(num_tokens, num_digits, n_tokens, n_digits)
        tok_norm = _normaliser(num_tokens, n_tokens, dtype)
        dig_norm = _normaliser(num_digits, n_digits, dtype)

        ce = ce_t.sum() / tok_norm
        token_loss = self.token_part(batch, ce_t)
        aux = torch.zeros((), dtype=dtype, device=ce.device)
        if token_loss is not None:
            aux = aux + token_loss.sum() / tok_norm - ce
        term = self.digit_part(batch)
        if term is not None:
            term = torch.where(is_digit, term, torch.zeros_like(term))
            aux = aux + self.weight * term.sum() / dig_norm
        loss = ce + aux
        if self.validate and not bool(torch.isfinite(loss.detach())):
            raise FloatingPointError(_describe_non_finite(self.name, logits, loss))
        return LossOutput(loss=loss, ce=ce, aux=aux, metrics=self._metrics(batch, n_tokens, n_digits))

    # --- internals -------------------------------------------------------------------------
    def _prepare(self, logits: torch.Tensor, labels: torch.Tensor) -> Batch:
        if not torch.is_floating_point(logits):
            raise TypeError(f"logits must be floating point, got {logits.dtype}")
        if labels.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"labels must be int64 token ids, got {labels.dtype}")
        if logits.dim() < 2 or logits.shape[:-1] != labels.shape:
            raise ValueError(
                f"logits {tuple(logits.shape)} must be labels {tuple(labels.shape)} plus a "
                "vocabulary dimension (labels aligned position by position; the caller shifts)"
            )
        if labels.dim() < 1:
            raise ValueError("labels need a sequence dimension")
        vocab_size = logits.shape[-1]
        labels = labels.long()
        if self.validate:
            _check_label_ids(labels, vocab_size)
        flat_labels = labels.reshape(-1)
        batch = Batch(logits.reshape(-1, vocab_size), flat_labels, flat_labels != IGNORE_INDEX, compute_dtype(logits.dtype))
        if self.vocab is not None:
            self.vocab.check_fits(vocab_size)
            batch.spans = NumberSpans(*(t.reshape(-1) for t in number_spans(labels, self.vocab)))
            batch.target_digit = batch.spans.digit_value.clamp_min(0)
        return batch

    def _metrics(self, batch: Batch, n_tokens: torch.Tensor, n_digits: torch.Tensor) -> dict[str, torch.Tensor]:
        metrics = {"n_tokens": n_tokens.detach().float(), "n_digits": n_digits.detach().float()}
        if batch.digit_logits is None:
            return metrics
        with torch.no_grad():
            mask = batch.spans.is_digit
            count = n_digits.clamp_min(1).float()
            entropy = torch.where(mask, digit_entropy(batch.digit_logits), 0.0).sum() / count
            hit = (batch.digit_logits.argmax(-1) == batch.target_digit) & mask
            metrics["digit_entropy"] = entropy.float()
            metrics["digit_acc"] = hit.sum().float() / count
        return metrics

    @staticmethod
    def _check_normalisers(num_tokens: Normaliser, num_digits: Normaliser, n_tokens: torch.Tensor, n_digits: torch.Tensor) -> None:
        for label, given, local in (("num_tokens", num_tokens, n_tokens), ("num_digits", num_digits, n_digits)):
            if given is None:
                continue
            value = float(given)
            if not value >= 0 or value != value:
                raise ValueError(f"{label} must be a count >= 0, got {given}")
            local_count = int(local)
            if value < local_count:
                raise ValueError(
                    f"{label}={value:g} is smaller than the {local_count} counted in this batch; it "
                    "must be the global count over the accumulation window and all ranks"
                )


def _normaliser(given: Normaliser, local: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    value = local if given is None else torch.as_tensor(given, device=local.device)
    return value.to(dtype).clamp_min(1.0)


def _check_label_ids(labels: torch.Tensor, vocab_size: int) -> None:
    bad = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= vocab_size))
    if bool(bad.any()):
        where = bad.nonzero()[0].tolist()
        raise ValueError(
            f"label {int(labels[tuple(where)])} at position {tuple(where)} is not a token id of the "
            f"logits' vocabulary [0, {vocab_size}) nor the ignore index {IGNORE_INDEX}"
        )


def _describe_non_finite(name: str, logits: torch.Tensor, loss: torch.Tensor) -> str:
    bad = ~torch.isfinite(logits)
    msg = f"loss {name!r} is {float(loss)}"
    if bool(bad.any()):
        rows = bad.any(-1).nonzero()
        msg += (
            f": the logits hold {int(bad.sum())} NaN/inf values at {rows.shape[0]} positions, "
            f"first at position {tuple(rows[0].tolist())}"
        )
    else:
        msg += " although all logits are finite (overflow in the loss; check the logits' scale)"
    return msg
