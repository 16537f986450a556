"""The loss interface: validation, number spans, global normalisers and the result type.

A loss is ``CE-like token part + lambda * digit part``:

    loss = sum_t token_loss_t / num_tokens + weight * sum_i digit_term_i / num_digits

``num_tokens`` / ``num_digits`` are the global normalisers (non-ignored tokens and digit positions
over the whole accumulation window and all data-parallel ranks); by default they are counted in
this batch. With them, the sum of the losses of micro-batches equals the loss of the whole batch.

"Digit positions" are the positions whose label is a number token: one of '0'..'9', or on a
multi-digit vocabulary (Llama-3) a token of 1..K digits, scored within its width group
(docs/number_tokens.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Optional, Union

import torch

from ..spans import NumberSpans, invalid_labels, number_spans
from ..vocab import DigitVocab
from .digit_terms import GroupTerm, by_width, number_entropy, number_hits
from .number_runs import SequenceShard, ShardRuns, shard_runs
from .statistics import IGNORE_INDEX, LogitStats, VocabSlice, compute_dtype, hidden_statistics, logit_statistics

Normaliser = Optional[Union[int, float, torch.Tensor]]
# The input checks a loss can run (see NumericLoss): device-side asserts, host-side with positions, none.
VALIDATE_MODES = ("async", "sync", "off")


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


@dataclass(frozen=True)
class LossNeeds:
    """What a loss class needs from the model and the tokenizer; :func:`del_core.losses.build_loss_for_model`
    supplies it.

    vocab:          a :class:`DigitVocab` (the loss scores digits): building the loss without one
                    raises, and a trainer whose tokenizer has no number vocabulary refuses the loss.
    head_weight_as: the constructor option that receives a frozen copy of the LM-head weight [V, H]
                    taken before training (EMO's ``cost_embedding``), or None when the loss needs none.
                    Under tensor parallelism each rank keeps its vocabulary rows
                    (:meth:`NumericLoss.for_vocab_slice`).
    step_totals:    the loss scales its term by totals of the whole global batch: a trainer runs
                    :func:`del_core.losses.step_totals.measure_step_totals` before each step.
    per_sequence:   the loss averages terms per sequence (row of the labels), so its value depends
                    on which examples share a row: a trainer does not join a batch's examples into
                    one row for it (``data.padding_free``).
    """

    vocab: bool = False
    head_weight_as: Optional[str] = None
    step_totals: bool = False
    per_sequence: bool = False


@dataclass
class Batch:
    """A validated, flattened batch and the statistics of its logits.

    labels/valid: [N] int64 / bool; ``dtype`` is the compute dtype.
    stats:        :class:`LogitStats` of the logits (see :mod:`.statistics`).
    spans:        flattened :class:`NumberSpans` ([N] each), None without a vocabulary.
    digit_logits: [N, C] in the compute dtype: the logits of the vocabulary's C number tokens
                  (``DigitVocab.number_ids``; the ten digits on a single-digit vocabulary), zero
                  outside number-token positions; None without a vocabulary.
    target_digit: [N] int64, the target token's value at number-token positions, 0 elsewhere.
    group_offsets: the column offsets of the width groups (``DigitVocab.group_offsets``).
    rows:         the number of sequences (rows of the labels ``[-1, T]``) in the batch.
    positions:    [N] int64, the flat indices in the whole batch's labels of the N positions the
                  call scores (a compacted call: the scored positions alone), or None (all of them).
    whole_spans:  the flattened :class:`NumberSpans` of the whole batch's labels (those of a
                  compacted call's positions are ``spans``); ``spans`` itself otherwise.
    """

    labels: torch.Tensor
    valid: torch.Tensor
    dtype: torch.dtype
    spans: Optional[NumberSpans] = None
    stats: Optional[LogitStats] = None
    digit_logits: Optional[torch.Tensor] = None
    target_digit: Optional[torch.Tensor] = None
    group_offsets: tuple[int, ...] = (0, 10)
    rows: int = 1
    positions: Optional[torch.Tensor] = None
    whole_spans: Optional[NumberSpans] = None

    def number_runs(self, join_points: bool, shard: Optional[SequenceShard]) -> ShardRuns:
        """The digit runs of the whole sequences read at this call's positions
        (:func:`del_core.losses.number_runs.shard_runs`)."""
        return shard_runs(self.whole_spans, self.rows, join_points, shard, self.positions)

    def by_width(self, term: GroupTerm) -> torch.Tensor:
        """[N] ``term`` at every number-token position, scored within its target's width group
        (:func:`del_core.losses.digit_terms.by_width`)."""
        return by_width(self.digit_logits, self.spans.width, self.target_digit, self.group_offsets, term)


class NumericLoss(torch.nn.Module):
    """Base of every loss. Subclasses implement :meth:`token_part` and/or :meth:`digit_part`.

    ``validate`` chooses the input checks (see :data:`VALIDATE_MODES`):

    * ``"async"`` (default; ``True`` means the same): label ids in ``[0, V)`` or -100, and given
      normalisers >= the counts of this batch, as device-side assertions (``torch._assert_async``):
      no host-device synchronisation, so the loss can sit in a CUDA-graph-captured step. A failed
      check raises ``RuntimeError`` on CPU and a device-side assert on CUDA, naming the check.
    * ``"sync"``: the same checks plus the finiteness of the result, with errors that name the
      position and value (``ValueError`` / ``FloatingPointError``); costs a few host syncs per
      call. For debugging, and for CPU runs where syncs are free.
    * ``"off"`` (or ``False``): no checks.
    """

    name = "base"
    needs: ClassVar[LossNeeds] = LossNeeds()

    def __init__(self, vocab: Optional[DigitVocab], weight: float = 0.0, validate: Union[bool, str] = "async"):
        super().__init__()
        if vocab is None and self.needs.vocab:
            raise ValueError(missing_vocab_message(self.name))
        self.vocab = vocab
        self.weight = float(weight)
        self.validate = validate_mode(validate)
        self.sequence_shard: Optional[SequenceShard] = None

    def set_sequence_shard(self, shard: Optional[SequenceShard]) -> None:
        """Under sequence parallelism the calls that follow score one shard of their sequences
        (:class:`SequenceShard`; None: whole sequences, the default). A loss whose term is a sum
        over tokens ignores it; the number-level losses (``number_level``, ``ntil``) sum each
        number's partial sums over the group with it, so that the ranks' losses add up to the
        whole sequences' loss and gradient. Every rank of the group then calls the loss alike."""
        self.sequence_shard = shard

    def set_weight(self, weight: float) -> None:
        """Set lambda after the loss was built: ``weight="auto"`` builds the loss with a placeholder
        (:data:`del_core.losses.AUTO_PLACEHOLDER`) and the measured value comes in here, once.
        ValueError for a weight that is not a finite number >= 0."""
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"{self.name}: weight must be a finite number >= 0, got {weight}")
        self.weight = float(weight)

    # --- hooks for subclasses -------------------------------------------------------------
    def token_part(self, batch: Batch, ce: torch.Tensor) -> Optional[torch.Tensor]:
        """Per-token loss [N] replacing CE, or None to use CE itself."""
        return None

    def digit_part(self, batch: Batch) -> Optional[torch.Tensor]:
        """Per-position auxiliary term [N] (only digit positions are summed), or None."""
        return None

    def set_step(self, step: int) -> None:
        """The optimizer step about to run (the trainers call it before each step); a loss that
        draws random numbers (NTIL) seeds them with it, so a resumed run repeats them."""

    def begin_step_totals(self) -> None:
        """A loss with ``needs.step_totals``: the next calls measure the step's totals (their aux
        is the sums of :mod:`del_core.losses.step_totals`), until :meth:`set_step_totals`."""

    def set_step_totals(self, totals: Optional[torch.Tensor]) -> None:
        """A loss with ``needs.step_totals``: the [2] totals of this step's global batch, or None
        (after the step: each call scales by its own sums again)."""

    def weighted_aux(self, batch: Batch, term_sum: torch.Tensor, digit_norm, ce: torch.Tensor) -> torch.Tensor:
        """The aux part from the sum of :meth:`digit_part` over the digit positions: lambda times
        its mean over the global digit count ``digit_norm``. ``ce`` is this call's share of the
        mean token CE (a loss that scales its term by CE, NTIL, overrides this)."""
        return self.weight * term_sum / digit_norm

    def cost_embedding_rows(self) -> Optional[torch.Tensor]:
        """The cost embedding E [V or V_local, H] whose expectation ``softmax(z) @ E`` the loss needs."""
        return None

    def for_vocab_slice(self, vocab_slice: VocabSlice) -> NumericLoss:
        """This loss for a process whose logits hold the columns ``vocab_slice`` (tensor
        parallelism): a loss holding per-token-id rows (EMO's cost embedding) returns a copy that
        keeps only the slice's rows; every other loss returns itself."""
        return self

    # --- the interface ---------------------------------------------------------------------
    def forward(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
        *,
        vocab_slice: Optional[VocabSlice] = None,
        spans: Optional[NumberSpans] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> LossOutput:
        """``logits`` [..., T, V] of any float dtype, ``labels`` [..., T] int64 (-100 = ignored),
        aligned position by position (the caller shifts). With ``vocab_slice`` the logits hold only
        that slice's columns (tensor parallelism, see ``del_core.parallel``). ``spans``: the
        labels' :func:`number_spans` when the caller already has them (computed here otherwise).

        ``positions`` [M] int64: the logits [M, V] are those of these flat positions of ``labels``
        alone (ascending; a compacted call: the scored positions, see
        :func:`del_core.losses.scored_positions`); the number structure is still that of the whole
        ``labels``, so the loss, its gradient and the metrics equal those of the full [..., T, V]
        logits when every scored position is among them."""
        if not torch.is_floating_point(logits):
            raise TypeError(f"logits must be floating point, got {logits.dtype}")
        _check_shapes(logits, labels, "logits", positions)
        vocab_slice = vocab_slice or VocabSlice.full(logits.shape[-1])
        batch = self._prepare(labels, vocab_slice.vocab_size, compute_dtype(logits.dtype), spans, positions)
        batch.stats = logit_statistics(
            logits.reshape(-1, logits.shape[-1]),
            batch.labels,
            self._number_ids(),
            self.cost_embedding_rows(),
            vocab_slice,
        )
        return self._compose(batch, num_tokens, num_digits, logits)

    def from_hidden(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
        *,
        vocab_slice: Optional[VocabSlice] = None,
        chunk_size: int = 256,
        spans: Optional[NumberSpans] = None,
        num_chunks: Optional[int] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> LossOutput:
        """The same loss from hidden states [..., T, H] and the LM-head weight [V or V_local, H],
        ``chunk_size`` tokens at a time: the [N, V] logits are never held whole. Gradients flow to
        ``hidden`` and ``weight``. Under tensor parallelism pass ``head.gather_input(hidden)`` and
        the head's rows (:class:`del_core.parallel.VocabParallelLMHead`), so that the hidden
        gradient is summed over the group. Under torch.compile with varying lengths pass
        ``num_chunks`` instead of relying on ``chunk_size`` (see :func:`hidden_statistics`).
        ``positions`` [M]: the hidden states [M, H] are those of these flat positions of
        ``labels`` alone (see :meth:`forward`)."""
        if not torch.is_floating_point(hidden):
            raise TypeError(f"hidden states must be floating point, got {hidden.dtype}")
        _check_shapes(hidden, labels, "hidden", positions)
        vocab_slice = vocab_slice or VocabSlice.full(weight.shape[0])
        batch = self._prepare(labels, vocab_slice.vocab_size, compute_dtype(hidden.dtype), spans, positions)
        batch.stats = hidden_statistics(
            hidden.reshape(-1, hidden.shape[-1]),
            weight,
            batch.labels,
            self._number_ids(),
            self.cost_embedding_rows(),
            vocab_slice,
            chunk_size,
            eager_ce_grad=self._plain_ce(),
            num_chunks=num_chunks,
        )
        return self._compose(batch, num_tokens, num_digits, hidden)

    # --- internals -------------------------------------------------------------------------
    def _plain_ce(self) -> bool:
        """True when the token part is plain CE (every token's CE gets the same gradient)."""
        return type(self).token_part is NumericLoss.token_part

    def _number_ids(self):
        return self.vocab.number_ids if self.vocab is not None else None

    def _prepare(
        self,
        labels: torch.Tensor,
        vocab_size: int,
        dtype: torch.dtype,
        spans: Optional[NumberSpans] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> Batch:
        """The batch of the call: with ``positions``, the spans come from the whole ``labels``
        (a number never runs across the positions left out) and are then read at the positions."""
        if labels.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"labels must be int64 token ids, got {labels.dtype}")
        labels = labels.long()
        if self.validate == "sync":
            _check_label_ids(labels, vocab_size)
        elif self.validate == "async":
            _assert_label_ids(labels, vocab_size)
        flat = labels.reshape(-1)
        rows = flat.numel() // max(labels.shape[-1], 1)
        if positions is not None:
            flat = flat.index_select(0, positions)
        batch = Batch(flat, flat != IGNORE_INDEX, dtype, rows=rows, positions=positions)
        if self.vocab is not None:
            self.vocab.check_fits(vocab_size)
            if spans is None:
                spans = number_spans(labels, self.vocab)
            elif spans.is_digit.shape != labels.shape:
                raise ValueError(f"spans {tuple(spans.is_digit.shape)} do not match labels {tuple(labels.shape)}")
            batch.whole_spans = NumberSpans(*(t.reshape(-1) for t in spans))
            batch.spans = batch.whole_spans
            if positions is not None:
                batch.spans = NumberSpans(*(t.index_select(0, positions) for t in batch.whole_spans))
            batch.target_digit = batch.spans.digit_value.clamp_min(0)
            batch.group_offsets = self.vocab.group_offsets
        return batch

    def _compose(
        self, batch: Batch, num_tokens: Normaliser, num_digits: Normaliser, source: torch.Tensor
    ) -> LossOutput:
        dtype = batch.dtype
        ce_t = batch.stats.ce
        if batch.stats.digit_logits is not None:
            # Zeros outside digit positions keep masked-out terms (and their gradients) finite
            # even where the logits hold -inf (masked vocabulary entries).
            batch.digit_logits = torch.where(batch.spans.is_digit.unsqueeze(-1), batch.stats.digit_logits, 0.0)
        n_tokens = batch.valid.sum()
        is_digit = batch.spans.is_digit if batch.spans is not None else None
        n_digits = is_digit.sum() if is_digit is not None else torch.zeros_like(n_tokens)
        if self.validate != "off":
            _check_normalisers(num_tokens, num_digits, n_tokens, n_digits, self.validate == "sync")
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
            aux = aux + self.weighted_aux(batch, term.sum(), dig_norm, ce)
        loss = ce + aux
        if self.validate == "sync" and not bool(torch.isfinite(loss.detach())):
            raise FloatingPointError(_describe_non_finite(self.name, source, loss))
        return LossOutput(loss=loss, ce=ce, aux=aux, metrics=self._metrics(batch, n_tokens, n_digits))

    def _metrics(self, batch: Batch, n_tokens: torch.Tensor, n_digits: torch.Tensor) -> dict[str, torch.Tensor]:
        metrics = {"n_tokens": n_tokens.detach().float(), "n_digits": n_digits.detach().float()}
        if batch.digit_logits is None:
            return metrics
        with torch.no_grad():
            mask = batch.spans.is_digit
            count = n_digits.clamp_min(1).float()
            entropy = number_entropy(batch.digit_logits, batch.spans.width, batch.group_offsets)
            entropy = torch.where(mask, entropy, 0.0).sum() / count
            hit = number_hits(batch.digit_logits, batch.spans.width, batch.target_digit, batch.group_offsets) & mask
            metrics["digit_entropy"] = entropy.float()
            metrics["digit_acc"] = hit.sum().float() / count
        return metrics


def missing_vocab_message(name: str) -> str:
    """The error text for a loss that scores digits built without a vocabulary."""
    return f"loss {name!r} needs a DigitVocab (its auxiliary term scores digits)"


def _check_shapes(
    source: torch.Tensor, labels: torch.Tensor, what: str, positions: Optional[torch.Tensor] = None
) -> None:
    if positions is not None:
        if positions.dim() != 1 or positions.dtype != torch.int64:
            raise ValueError(f"positions must be a 1-D int64 tensor of flat label indices, got {positions.dtype}")
        if source.dim() != 2 or source.shape[0] != positions.shape[0]:
            raise ValueError(
                f"{what} {tuple(source.shape)} must hold one row per position ({positions.shape[0]}) "
                "plus one last dimension"
            )
        return
    if source.dim() < 2 or source.shape[:-1] != labels.shape:
        raise ValueError(
            f"{what} {tuple(source.shape)} must be labels {tuple(labels.shape)} plus one last dimension "
            "(labels aligned position by position; the caller shifts)"
        )


def validate_mode(validate: Union[bool, str, None]) -> str:
    """The mode of ``validate``: True -> "async", False/None -> "off", else one of VALIDATE_MODES."""
    if validate is True:
        return "async"
    if validate is False or validate is None:
        return "off"
    if validate not in VALIDATE_MODES:
        raise ValueError(f"validate must be one of {', '.join(VALIDATE_MODES)} (or True/False), got {validate!r}")
    return validate


def _normaliser(given: Normaliser, local: torch.Tensor, dtype: torch.dtype) -> Union[torch.Tensor, float]:
    """The divisor (>= 1): a Python float for a Python number (no host-to-device copy), else a tensor."""
    if given is None:
        return local.to(dtype).clamp_min(1.0)
    if isinstance(given, torch.Tensor):
        return given.to(device=local.device, dtype=dtype).clamp_min(1.0)
    return max(float(given), 1.0)


def _check_normalisers(
    num_tokens: Normaliser, num_digits: Normaliser, n_tokens: torch.Tensor, n_digits: torch.Tensor, on_host: bool
) -> None:
    """A given normaliser must be a count >= the one of this batch (it is the global count).

    Python numbers are checked on the host for sign and NaN; the comparison with the batch's
    count (a device tensor) is a device-side assertion unless ``on_host``."""
    for label, given, local in (("num_tokens", num_tokens, n_tokens), ("num_digits", num_digits, n_digits)):
        if given is None:
            continue
        if on_host or not isinstance(given, torch.Tensor):
            value = float(given)
            if not value >= 0:
                raise ValueError(f"{label} must be a count >= 0, got {given}")
        if not on_host:
            torch._assert_async(
                local <= given,
                f"{label} is smaller than the count of this batch (or negative); it must be the global "
                "count over the accumulation window and all ranks (validate='sync' shows the values)",
            )
            continue
        local_count = int(local)
        if value < local_count:
            raise ValueError(
                f"{label}={value:g} is smaller than the {local_count} counted in this batch; it "
                "must be the global count over the accumulation window and all ranks"
            )


def _assert_label_ids(labels: torch.Tensor, vocab_size: int) -> None:
    """Device-side form of :func:`_check_label_ids` (no host sync; no position in the message)."""
    bad = invalid_labels(labels, vocab_size)
    torch._assert_async(
        ~bad.any(),
        f"labels hold ids that are neither token ids of the logits' vocabulary [0, {vocab_size}) nor the "
        f"ignore index {IGNORE_INDEX} (build the loss with validate='sync' for the position and value)",
    )


def _check_label_ids(labels: torch.Tensor, vocab_size: int) -> None:
    bad = invalid_labels(labels, vocab_size)
    if bool(bad.any()):
        where = bad.nonzero()[0].tolist()
        raise ValueError(
            f"label {int(labels[tuple(where)])} at position {tuple(where)} is not a token id of the "
            f"logits' vocabulary [0, {vocab_size}) nor the ignore index {IGNORE_INDEX}"
        )


def _describe_non_finite(name: str, source: torch.Tensor, loss: torch.Tensor) -> str:
    """Error text for a non-finite loss; ``source`` is the logits or hidden states."""
    bad = ~torch.isfinite(source)
    msg = f"loss {name!r} is {float(loss)}"
    if bool(bad.any()):
        rows = bad.any(-1).nonzero()
        msg += (
            f": the inputs hold {int(bad.sum())} NaN/inf values at {rows.shape[0]} positions, "
            f"first at position {tuple(rows[0].tolist())}"
        )
    else:
        msg += " although all inputs are finite (overflow, or -inf at a target's logit)"
    return msg


class DigitAuxLoss(NumericLoss):
    """CE plus ``weight`` (>= 0) times a term over the number positions (DEL, NTL, DIST2 and the
    newer number losses)."""

    needs = LossNeeds(vocab=True)

    def __init__(self, vocab: DigitVocab, weight: float, validate: Union[bool, str] = "async"):
        if weight < 0:
            raise ValueError(f"{self.name}: weight must be >= 0, got {weight}")
        super().__init__(vocab, weight, validate)
