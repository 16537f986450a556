"""Where a loss reads the model's scores: one object per path, used by every caller alike.

A :class:`LossPath` decides both halves of a loss on a causal LM:

* how the model runs (:meth:`LossPath.model_output`): the caller hands it a :class:`CausalLMRun`,
  its own way of running its model (the trainer's objective, the Trainer adapter), and the path
  asks it for what it scores;
* how that is scored (:meth:`LossPath.score`): the loss's call on it, normalised by the given
  global counts.

Two paths, one name each (:data:`LOSS_PATHS`, built by name with :func:`build_loss_path`):

* ``"logits"`` (:class:`LogitsPath`): the model's logits [..., T, V] go to ``loss(logits, targets, ...)``;
* ``"chunked"`` (:class:`ChunkedPath`): the body's last hidden states [..., T, H] (the LM head's
  input) and the LM-head weight [V or V_local, H] go to ``loss.from_hidden``, ``chunk_size`` tokens
  at a time, so the [N, V] logits are never held whole.

Either path can be *compacted* (:class:`CompactedPath`, ``build_loss_path(..., compact=True)``):
the run gives the body's last hidden states [..., T, H], the rows of the scored positions (label
not -100; :func:`scored_positions`) are gathered once, [M, H], and only they go through the LM head
(the head module itself on ``"logits"``, the head weight chunk by chunk on ``"chunked"``) and the
loss. The loss reads the number structure of the whole labels at those positions
(``NumericLoss.forward(..., positions=)``), so the loss, its gradients and its metrics are those of
the uncompacted path. The gather's size depends on the labels: a caller that found the scored
positions on the host (the trainer, ``TokenBatch.with_scored``) hands them in (``positions=``) and
the path adds no host-device synchronisation; otherwise it finds them on the device, one
synchronisation per call (``nonzero``).

The callers never branch on the path: each asks the run for what it needs and scores it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Optional, Protocol

import torch

from ..spans import IGNORE_INDEX, NumberSpans
from .base import LossOutput, Normaliser, NumericLoss
from .statistics import VocabSlice

LOSS_PATHS = ("logits", "chunked")


def loss_path_name(value: str, setting: str = "loss_path") -> str:
    """``value`` when it is one of :data:`LOSS_PATHS`; ValueError naming ``setting`` (the option as
    the caller spells it) otherwise."""
    if value not in LOSS_PATHS:
        raise ValueError(
            f"{setting}={value!r}: choose 'logits' (the model's logits) or 'chunked' (from the last hidden "
            "states and the LM-head weight, chunk by chunk)"
        )
    return value


@dataclass(frozen=True)
class LossCalls:
    """The calls of one loss, one per path of :data:`LOSS_PATHS`: ``logits`` (``NumericLoss.forward``)
    and ``chunked`` (``NumericLoss.from_hidden``), or compiled forms of them with the same signatures."""

    logits: Callable[..., LossOutput]
    chunked: Callable[..., LossOutput]

    @classmethod
    def of(cls, loss: NumericLoss) -> LossCalls:
        return cls(loss.forward, loss.from_hidden)


class CausalLMRun(Protocol):
    """How a caller runs its causal LM on one batch; a path calls what it needs, once."""

    def logits(self) -> torch.Tensor:
        """The logits [..., T, V or V_local], one row per input position."""

    def hidden_states(self) -> torch.Tensor:
        """The body's last hidden states [..., T, H] (after the final norm: the LM head's input)."""

    def head_weight(self) -> torch.Tensor:
        """The LM-head weight [V or V_local, H] (the parameter: gradients flow into it), read when
        the loss scores, after the model's forward."""

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        """The LM-head module on ``rows`` [M, H] of the last hidden states: their logits [M, V],
        through the module (so that an engine's hooks on it, e.g. ZeRO-3 gathering its weight, run)."""


class LossPath(ABC):
    """One way from a causal LM to its loss; see the module doc.

    ``reads_head_weight``: the loss reads the LM-head weight itself after the model's forward, so
    an engine that partitions parameters must make that weight whole where the loss runs.
    """

    name: ClassVar[str]
    reads_head_weight: ClassVar[bool]

    def check_model(self, lm: torch.nn.Module) -> None:
        """ValueError when ``lm`` (a Hugging Face causal LM) cannot be scored on this path;
        every model can by default."""
        return None

    @abstractmethod
    def model_output(self, run: CausalLMRun) -> torch.Tensor:
        """Run the model as this path needs (through ``run``): the tensor :meth:`score` scores."""

    @abstractmethod
    def score(
        self,
        calls: LossCalls,
        output: torch.Tensor,
        targets: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
        *,
        head_weight: Optional[Callable[[], torch.Tensor]] = None,
        vocab_slice: Optional[VocabSlice] = None,
        spans: Optional[NumberSpans] = None,
        head: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> LossOutput:
        """The loss of ``targets`` [..., T] (aligned, -100 ignored) on ``output`` (from
        :meth:`model_output`), with ``calls`` (the loss's own or compiled calls).

        ``num_tokens``/``num_digits``: the global normalisers; ``head_weight``: reads the LM-head
        weight [V or V_local, H] (called only where ``reads_head_weight``); ``vocab_slice``: this
        process's vocabulary columns under tensor parallelism; ``spans``: the targets' number spans
        if known; ``head``: the LM-head module's call on rows [M, H] (:meth:`CausalLMRun.head`;
        read by a compacted path); ``positions`` [M]: ``output`` holds only these flat positions of
        ``targets`` (one row each; ``NumericLoss.forward``), or, on a compacted path, whose
        ``output`` is whole, the scored positions to gather (:class:`CompactedPath`)."""


class LogitsPath(LossPath):
    """``"logits"``: the model's logits [..., T, V or V_local] go to ``loss(logits, targets, ...)``."""

    name = "logits"
    reads_head_weight = False

    def model_output(self, run: CausalLMRun) -> torch.Tensor:
        return run.logits()

    def score(
        self,
        calls: LossCalls,
        output: torch.Tensor,
        targets: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
        *,
        head_weight: Optional[Callable[[], torch.Tensor]] = None,
        vocab_slice: Optional[VocabSlice] = None,
        spans: Optional[NumberSpans] = None,
        head: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> LossOutput:
        return calls.logits(
            output, targets, num_tokens, num_digits, vocab_slice=vocab_slice, spans=spans, positions=positions
        )


class ChunkedPath(LossPath):
    """``"chunked"``: the last hidden states [..., T, H] scored against the LM-head weight
    ``chunk_size`` tokens at a time, or in ``num_chunks`` chunks (a fixed chunk count: one compiled
    graph for every padded length, see ``NumericLoss.from_hidden``)."""

    name = "chunked"
    reads_head_weight = True

    def __init__(self, chunk_size: int = 256, num_chunks: Optional[int] = None):
        if chunk_size < 1:
            raise ValueError(f"chunk_size={chunk_size}: must be >= 1")
        self.chunk_size, self.num_chunks = chunk_size, num_chunks

    def check_model(self, lm: torch.nn.Module) -> None:
        head = lm.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError("loss_path=chunked needs an LM head without bias")
        if getattr(lm.config, "final_logit_softcapping", None):
            raise ValueError("loss_path=chunked does not support final_logit_softcapping models")

    def model_output(self, run: CausalLMRun) -> torch.Tensor:
        return run.hidden_states()

    def score(
        self,
        calls: LossCalls,
        output: torch.Tensor,
        targets: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
        *,
        head_weight: Optional[Callable[[], torch.Tensor]] = None,
        vocab_slice: Optional[VocabSlice] = None,
        spans: Optional[NumberSpans] = None,
        head: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> LossOutput:
        if head_weight is None:
            raise ValueError("the chunked loss path needs the LM-head weight [V, H]")
        return calls.chunked(
            output,
            head_weight(),
            targets,
            num_tokens,
            num_digits,
            vocab_slice=vocab_slice,
            chunk_size=self.chunk_size,
            spans=spans,
            num_chunks=self.num_chunks,
            positions=positions,
        )


def scored_positions(targets: torch.Tensor) -> torch.Tensor:
    """[M] int64, ascending: the flat indices of the positions of ``targets`` [..., T] whose label
    is scored (not -100). Its size depends on the labels: on an accelerator, reading it is one
    host-device synchronisation (``nonzero``)."""
    return (targets.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(-1)


class CompactedPath(LossPath):
    """``inner`` (a :class:`LogitsPath` or :class:`ChunkedPath`) on the scored positions alone:
    the body's last hidden states [..., T, H] are gathered at the scored positions once per call,
    [M, H], and scored as ``inner`` scores its output, with the loss told the positions (the
    number spans and runs stay those of the whole labels). On ``"logits"`` the rows go through the
    LM-head module (:meth:`CausalLMRun.head`), giving [M, V] logits; on ``"chunked"`` they are
    scored against the head weight ``chunk_size`` rows at a time. The positions are ``score``'s
    ``positions=`` when the caller has them (exactly :func:`scored_positions` of ``targets``, e.g.
    found on the host: no host sync), else :func:`scored_positions` on ``targets``' device (one
    host-device synchronisation per call). The normalisers stay the given global counts."""

    def __init__(self, inner: LossPath):
        if isinstance(inner, CompactedPath):
            raise ValueError("a compacted loss path is compacted once")
        self.inner = inner
        self.name = inner.name
        self.reads_head_weight = inner.reads_head_weight

    def check_model(self, lm: torch.nn.Module) -> None:
        """The inner path's checks, and no step between the head and the logits the compacted call
        would skip: the logits must be the head module's output."""
        self.inner.check_model(lm)
        config = getattr(lm, "config", None)
        for key, neutral in (("final_logit_softcapping", None), ("logit_scale", 1.0), ("logits_scaling", 1.0)):
            value = getattr(config, key, None)
            if value not in (None, neutral):
                raise ValueError(
                    f"a compacted loss path: the model's {key}={value} transforms the LM head's output, which "
                    "the compacted path does not repeat; turn compaction off (loss.compact=false; compact=False "
                    "in the Trainer adapters)"
                )

    def model_output(self, run: CausalLMRun) -> torch.Tensor:
        return run.hidden_states()

    def score(
        self,
        calls: LossCalls,
        output: torch.Tensor,
        targets: torch.Tensor,
        num_tokens: Normaliser = None,
        num_digits: Normaliser = None,
        *,
        head_weight: Optional[Callable[[], torch.Tensor]] = None,
        vocab_slice: Optional[VocabSlice] = None,
        spans: Optional[NumberSpans] = None,
        head: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        positions: Optional[torch.Tensor] = None,
    ) -> LossOutput:
        if positions is None:
            positions = scored_positions(targets)
        rows = output.reshape(-1, output.shape[-1]).index_select(0, positions)
        if not self.inner.reads_head_weight:
            if head is None:
                raise ValueError("the compacted logits path needs the LM-head module (head=)")
            rows = head(rows)
        return self.inner.score(
            calls,
            rows,
            targets,
            num_tokens,
            num_digits,
            head_weight=head_weight,
            vocab_slice=vocab_slice,
            spans=spans,
            positions=positions,
        )


def build_loss_path(
    name: str,
    chunk_size: int = 256,
    num_chunks: Optional[int] = None,
    setting: str = "loss_path",
    compact: bool = False,
) -> LossPath:
    """The :class:`LossPath` called ``name`` (one of :data:`LOSS_PATHS`; ValueError naming
    ``setting`` otherwise); ``chunk_size`` and ``num_chunks`` configure the chunked path;
    ``compact``: that path on the scored positions alone (:class:`CompactedPath`)."""
    path = ChunkedPath(chunk_size, num_chunks) if loss_path_name(name, setting) == "chunked" else LogitsPath()
    return CompactedPath(path) if compact else path


def loss_on_path(
    path: str,
    calls: LossCalls,
    source: torch.Tensor,
    targets: torch.Tensor,
    num_tokens: Normaliser = None,
    num_digits: Normaliser = None,
    *,
    head_weight: Optional[torch.Tensor] = None,
    chunk_size: int = 256,
    num_chunks: Optional[int] = None,
    vocab_slice: Optional[VocabSlice] = None,
    spans: Optional[NumberSpans] = None,
) -> LossOutput:
    """:meth:`LossPath.score` of the path called ``path`` on a model output already at hand:
    ``source`` is the logits [..., T, V or V_local] on ``"logits"``, the last hidden states
    [..., T, H] on ``"chunked"``, scored against ``head_weight`` [V or V_local, H]."""
    if path not in LOSS_PATHS:
        raise ValueError(f"unknown loss path {path!r}; choose one of {', '.join(LOSS_PATHS)}")
    read_weight = None if head_weight is None else (lambda: head_weight)
    return build_loss_path(path, chunk_size, num_chunks).score(
        calls,
        source,
        targets,
        num_tokens,
        num_digits,
        head_weight=read_weight,
        vocab_slice=vocab_slice,
        spans=spans,
    )
