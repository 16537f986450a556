"""Per-token statistics of the LM-head softmax that every loss is built from.

Every loss of this package is a function of four per-token quantities of ``z`` (the logits of one
position, length V):

* ``ce``               [N]     ``logsumexp(z) - z[y]`` (0 at ignored positions);
* ``digit_logits``     [N, C] ``z[D]``, the logits of the C number tokens ``D`` (the ten digits
                               '0'..'9' for single-digit vocabularies, C = 1,110 for Llama-3's);
* ``expected``         [N, H]  ``softmax(z) @ E`` for a cost embedding E [V, H] (EMO only);
* ``target_embedding`` [N, H]  ``E[y]`` (EMO only; a constant).

This module computes them, with a backward that writes the gradient of ``z`` directly, from
(a) full or vocab-sharded logits, or (b) hidden states and the LM-head weight chunk by chunk over
tokens, never holding more than ``chunk_size x V`` logits. Vocab sharding is described by a
:class:`VocabSlice`: this process holds the columns ``[start, end)`` of a vocabulary of
``vocab_size``; its ``reducer`` all-reduces small per-token buffers over the processes holding the
other columns (the parallel layer provides one; without it nothing is communicated). Per token one
MAX reduction of 1 number and one SUM reduction of ``2 + C + 2H`` numbers cross the reducer,
whatever V is; the backward communicates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Protocol

import torch

from ..spans import IGNORE_INDEX


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for half/bf16/fp32 input; float64 stays float64 (for gradcheck)."""
    return torch.promote_types(dtype, torch.float32)


class Reducer(Protocol):
    """All-reduces over the processes that hold the other vocabulary columns, in place."""

    def max_(self, tensor: torch.Tensor) -> torch.Tensor: ...

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor: ...


class LocalReducer:
    """The reducer of an unsharded vocabulary: nothing to reduce."""

    def max_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor


_LOCAL_REDUCER = LocalReducer()


@dataclass(frozen=True)
class VocabSlice:
    """This process's contiguous vocabulary columns ``[start, end)`` of ``vocab_size``.

    Under tensor parallelism every process of the group passes the same labels (global ids) and
    its own slice; the statistics, and so the loss, come out identical on all of them.
    """

    start: int
    end: int
    vocab_size: int
    reducer: Reducer = field(default_factory=LocalReducer, compare=False)

    @classmethod
    def full(cls, vocab_size: int) -> VocabSlice:
        # The shared reducer, not a new one: torch.compile cannot trace the default_factory call.
        return cls(0, vocab_size, vocab_size, _LOCAL_REDUCER)

    @property
    def size(self) -> int:
        return self.end - self.start

    def digit_columns(self, digit_ids: Sequence[int], device) -> tuple[torch.Tensor, torch.Tensor]:
        """(local columns, indices 0..C-1 into ``digit_ids``) of the number ids this slice owns;
        either may be empty.

        int64 tensors on ``device``, made once per (ids, slice, device) and cached: building them
        from Python lists on every call would be two host-to-device copies per loss call."""
        key = (tuple(int(i) for i in digit_ids), self.start, self.end, torch.device(device))
        cached = _DIGIT_COLUMNS.get(key)
        if cached is None:
            owned = [(i - self.start, d) for d, i in enumerate(key[0]) if self.start <= i < self.end]
            columns = torch.tensor([c for c, _ in owned], dtype=torch.long, device=key[3])
            digits = torch.tensor([d for _, d in owned], dtype=torch.long, device=key[3])
            cached = _DIGIT_COLUMNS[key] = (columns, digits)
        return cached


# VocabSlice.digit_columns' cache: (digit ids, start, end, device) -> (columns, digit indices).
_DIGIT_COLUMNS: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


class LogitStats(NamedTuple):
    ce: torch.Tensor
    digit_logits: Optional[torch.Tensor]
    expected: Optional[torch.Tensor]
    target_embedding: Optional[torch.Tensor]


@dataclass
class _Setup:
    """Everything about one call that is not a differentiable tensor."""

    vslice: VocabSlice
    target: torch.Tensor  # [N] global ids, -100 ignored
    digit_ids: Optional[Sequence[int]]  # the C number-token ids
    embedding: Optional[torch.Tensor]  # [V_local, H] rows of this slice, compute dtype

    def __post_init__(self) -> None:
        self.valid = self.target != IGNORE_INDEX
        local = self.target - self.vslice.start
        self.owned = self.valid & (local >= 0) & (local < self.vslice.size)
        self.local_target = torch.where(self.owned, local, torch.zeros_like(local))
        if self.digit_ids is not None:
            self.columns, self.digit_index = self.vslice.digit_columns(self.digit_ids, self.target.device)
            # Every number token in this slice (always without tensor parallelism): the columns
            # come in number order, so no scatter is needed. Shape metadata, no host sync.
            self.owns_all_numbers = self.columns.numel() == len(self.digit_ids)


def _chunk_forward(z: torch.Tensor, s: _Setup, rows: slice, own_z: bool = False, want_softmax: bool = False):
    """Statistics of one chunk of logits z [c, V_local] (any float dtype).

    Returns (lse, ce, digit_logits, expected, target_embedding, softmax). Each slice's log-sum-exp
    is combined over the group as ``m + log(sum_r exp(lse_r - m))`` with ``m`` the largest. With
    ``own_z`` the caller gives z up, so it may be overwritten; ``want_softmax`` (with ``own_z``,
    without a cost embedding) returns the chunk's softmax in z's buffer, else None.
    """
    dtype = compute_dtype(z.dtype)
    own_z = own_z or z.dtype != dtype
    z = z.to(dtype)
    reducer = s.vslice.reducer
    owned = s.owned[rows]
    target_logit = z.gather(-1, s.local_target[rows].unsqueeze(-1)).squeeze(-1) * owned
    digits = None
    if s.digit_ids is not None:
        digits = _number_logits(z, s)
    if own_z:  # z becomes exp(z - local max) in place: no second [c, V] buffer
        local_max = z.max(dim=-1).values
        local_lse = local_max + torch.log(z.sub_(local_max.unsqueeze(-1)).exp_().sum(-1))
    else:  # the caller's logits: one fused pass
        local_lse = torch.logsumexp(z, dim=-1)
    row_max = reducer.max_(local_lse.clone())
    scale = torch.exp(local_lse - row_max)  # this slice's share of the sum-exp
    parts = [scale.unsqueeze(-1), target_logit.unsqueeze(-1)]
    if digits is not None:
        parts.append(digits)
    if s.embedding is not None:
        if own_z:
            local_q = z.mul_(torch.exp(local_max - local_lse).unsqueeze(-1))
        else:
            local_q = torch.sub(z, local_lse.unsqueeze(-1)).exp_()
        parts.append((local_q @ s.embedding) * scale.unsqueeze(-1))
        parts.append(s.embedding[s.local_target[rows]] * owned.unsqueeze(-1))
        del local_q
    packed = reducer.sum_(torch.cat(parts, dim=-1))
    sum_exp, target_logit = packed[:, 0], packed[:, 1]
    lse = row_max + torch.log(sum_exp)
    softmax = None
    if want_softmax and own_z and s.embedding is None:
        softmax = z.mul_(torch.exp(local_max - lse).unsqueeze(-1))
    ce = torch.where(s.valid[rows], lse - target_logit, torch.zeros_like(lse))
    n_numbers = len(s.digit_ids) if s.digit_ids is not None else 0
    digits = packed[:, 2 : 2 + n_numbers] if s.digit_ids is not None else None
    expected = target_embedding = None
    if s.embedding is not None:
        h = s.embedding.shape[1]
        offset = 2 + n_numbers
        expected = packed[:, offset : offset + h] / sum_exp.unsqueeze(-1)
        target_embedding = packed[:, offset + h :]
    return lse, ce, digits, expected, target_embedding, softmax


def _number_logits(z: torch.Tensor, s: _Setup) -> torch.Tensor:
    """[c, C] the number-token logits of z [c, V_local] this slice owns, zeros for the others.

    ``index_select`` rather than ``z[:, columns]``: the ids are scattered over the vocabulary
    (Llama-3's 1,110 over 28k rows) and advanced indexing along the last dim is about twice as
    slow on CPU; a slice that owns every column (no tensor parallelism) needs no scatter at all."""
    owned = z.index_select(1, s.columns)
    if s.owns_all_numbers:
        return owned
    digits = torch.zeros(z.shape[0], len(s.digit_ids), dtype=z.dtype, device=z.device)
    return digits.index_copy_(1, s.digit_index, owned)


def _owned_columns(g: torch.Tensor, s: _Setup) -> torch.Tensor:
    """The columns of ``g`` [c, C] (per number token) that belong to this slice's columns."""
    return g if s.owns_all_numbers else g.index_select(1, s.digit_index)


def _chunk_grad(z, s: _Setup, rows: slice, lse, expected, g_ce, g_digits, g_expected, out=None, softmax=None):
    """Gradient of the chunk's logits z [c, V_local], in the compute dtype:
    softmax(z) * (g_ce + g_E E^T - <g_E, q E>) - g_ce onehot(y) + g_digits at D.
    Written into ``out`` when given, or into ``softmax`` (the chunk's softmax, overwritten)."""
    dtype = lse.dtype
    valid = s.valid[rows]
    if softmax is not None:
        grad = softmax
    else:
        grad = (
            torch.sub(z, lse.unsqueeze(-1), out=out) if out is not None else torch.sub(z, lse.unsqueeze(-1)).to(dtype)
        )
        grad.exp_()
    g_ce = torch.zeros_like(lse) if g_ce is None else torch.where(valid, g_ce.to(dtype), torch.zeros_like(lse))
    if g_expected is not None:
        g_expected = g_expected.to(dtype)
        inner = g_expected @ s.embedding.T
        inner.add_((g_ce - (g_expected * expected).sum(-1)).unsqueeze(-1))
        grad.mul_(inner)
        del inner
    else:
        grad.mul_(g_ce.unsqueeze(-1))
    grad.scatter_add_(-1, s.local_target[rows].unsqueeze(-1), -(g_ce * s.owned[rows]).unsqueeze(-1))
    if g_digits is not None and s.digit_ids is not None and s.columns.numel():
        grad.index_add_(-1, s.columns, _owned_columns(g_digits.to(dtype), s))
    return grad


def _row_chunks(n_rows: int, chunk_size: int, num_chunks: Optional[int] = None) -> list[slice]:
    """Row ranges of ``chunk_size``; one empty range for no rows (outputs keep their shapes).

    With ``num_chunks`` (``n_rows`` a multiple of it): exactly that many equal ranges. Their count
    does not depend on ``n_rows``, so torch.compile traces the loop once for every length (a loop
    over ``range(0, n_rows, chunk_size)`` specialises the graph on ``n_rows``)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if num_chunks is not None:
        size = n_rows // num_chunks
        return [slice(i * size, (i + 1) * size) for i in range(num_chunks)]
    return [slice(i, i + chunk_size) for i in range(0, n_rows, chunk_size)] or [slice(0, 0)]


def _concat(chunks):
    """Concatenate per-chunk outputs (tuples of tensors or None) along the token dimension."""
    return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*chunks))


class _FromLogits(torch.autograd.Function):
    """Statistics of given logits [N, V_local], ``chunk_size`` rows at a time, so the fp32
    temporaries are [chunk, V_local] even for bf16 logits; the backward writes one [N, V_local]
    gradient in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, setup: _Setup, chunk_size: int, num_chunks: Optional[int]):
        chunks = [
            _chunk_forward(logits[rows], setup, rows)[:5]
            for rows in _row_chunks(logits.shape[0], chunk_size, num_chunks)
        ]
        lse, ce, digits, expected, target_embedding = _concat(chunks)
        ctx.setup, ctx.chunk_size, ctx.num_chunks = setup, chunk_size, num_chunks
        ctx.save_for_backward(logits, lse, expected if expected is not None else lse)
        if target_embedding is not None:
            ctx.mark_non_differentiable(target_embedding)
        return ce, digits, expected, target_embedding

    @staticmethod
    def backward(ctx, g_ce, g_digits, g_expected, _g_target_embedding):
        logits, lse, expected = ctx.saved_tensors
        same = compute_dtype(logits.dtype) == logits.dtype
        grad = torch.empty_like(logits)
        for rows in _row_chunks(logits.shape[0], ctx.chunk_size, ctx.num_chunks):
            part = _chunk_grad(
                logits[rows],
                ctx.setup,
                rows,
                lse[rows],
                expected[rows],
                None if g_ce is None else g_ce[rows],
                None if g_digits is None else g_digits[rows],
                None if g_expected is None else g_expected[rows],
                out=grad[rows] if same else None,
            )
            if not same:
                grad[rows] = part
            del part  # one fp32 chunk alive at a time
        return grad, None, None, None


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``h @ weight.T`` [c, V_local] in the compute dtype; a bf16 product's buffer is released as
    soon as its fp32 copy exists, so one [c, V] bf16 buffer never outlives the conversion."""
    return (h @ weight.T).to(compute_dtype(weight.dtype))


class _FromHidden(torch.autograd.Function):
    """Statistics of ``hidden @ weight.T`` chunk by chunk.

    With ``eager`` (set by losses whose CE part is the plain token sum, so every token's CE gets
    the same upstream gradient), the forward also computes the CE gradients of the hidden states
    and the weight, ``(softmax - onehot) @ W`` and ``(softmax - onehot)^T @ h``, while each chunk's
    logits are at hand; the backward scales them and adds the C number-token columns' share. That costs
    the same three [N, V, H] products as the naive path. Otherwise the backward recomputes each
    chunk's logits (a fourth product).

    The weight gradient is accumulated over chunks in the weight's dtype with ``addmm_`` (each
    chunk's product accumulates in fp32 inside the matmul; the sum over chunks is rounded to the
    weight's dtype, as in Liger-Kernel's fused linear CE): no fp32 [V, H] buffer and no per-chunk
    [V, H] temporary. Peak extra memory: the [V, H] gradient, the [N, H] hidden gradient, and one
    chunk's fp32 logits plus its gradient in the weight's dtype, ``c * V * (4 + 2)`` bytes in bf16.
    """

    @staticmethod
    def forward(ctx, hidden, weight, setup: _Setup, chunk_size: int, num_chunks: Optional[int], eager: bool):
        ce_grad_hidden = torch.zeros_like(hidden) if eager else None
        ce_grad_weight = torch.zeros_like(weight) if eager else None
        chunks = []
        for rows in _row_chunks(hidden.shape[0], chunk_size, num_chunks):
            h = hidden[rows]
            *stats, softmax = _chunk_forward(_chunk_logits(h, weight), setup, rows, own_z=True, want_softmax=eager)
            chunks.append(stats)
            if eager:
                lse = stats[0]
                grad_z = _chunk_grad(None, setup, rows, lse, None, torch.ones_like(lse), None, None, softmax=softmax)
                del softmax
                grad_z = grad_z.to(weight.dtype)
                ce_grad_hidden[rows] = grad_z @ weight
                ce_grad_weight.addmm_(grad_z.T, h)
                del grad_z
        lse, ce, digits, expected, target_embedding = _concat(chunks)
        ctx.setup, ctx.chunk_size, ctx.num_chunks = setup, chunk_size, num_chunks
        # Intermediate buffers, consumed (scaled in place and handed out) by the first backward;
        # a second backward through the same graph (retain_graph) recomputes instead.
        ctx.ce_grads = (ce_grad_hidden, ce_grad_weight) if eager else None
        ctx.save_for_backward(hidden, weight, lse, lse if expected is None else expected)
        if target_embedding is not None:
            ctx.mark_non_differentiable(target_embedding)
        return ce, digits, expected, target_embedding

    @staticmethod
    def backward(ctx, g_ce, g_digits, g_expected, _g_target_embedding):
        hidden, weight, lse, expected = ctx.saved_tensors
        setup = ctx.setup
        if ctx.ce_grads is not None and g_expected is None:
            ce_grads, ctx.ce_grads = ctx.ce_grads, None
            return _FromHidden._eager_backward(setup, hidden, weight, *ce_grads, g_ce, g_digits)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        for rows in _row_chunks(hidden.shape[0], ctx.chunk_size, ctx.num_chunks):
            h = hidden[rows]
            z = _chunk_logits(h, weight)
            grad_z = _chunk_grad(
                z,
                setup,
                rows,
                lse[rows],
                expected[rows] if g_expected is not None else None,
                None if g_ce is None else g_ce[rows],
                None if g_digits is None else g_digits[rows],
                None if g_expected is None else g_expected[rows],
                out=z,
            ).to(weight.dtype)
            del z
            grad_hidden[rows] = grad_z @ weight
            grad_weight.addmm_(grad_z.T, h)
            del grad_z
        return grad_hidden, grad_weight, None, None, None, None

    @staticmethod
    def _eager_backward(setup, hidden, weight, ce_grad_hidden, ce_grad_weight, g_ce, g_digits):
        if g_ce is None:
            grad_hidden, grad_weight = torch.zeros_like(hidden), torch.zeros_like(ce_grad_weight)
        else:
            # The eager contract: every valid token's CE has the same upstream gradient.
            valid = setup.valid
            scale = (g_ce * valid).sum() / valid.sum().clamp_min(1)
            # In place: the buffers were handed over by the forward and serve this backward only.
            grad_hidden = ce_grad_hidden.mul_(scale.to(hidden.dtype))
            grad_weight = ce_grad_weight.mul_(scale)
        if g_digits is not None and setup.digit_ids is not None and setup.columns.numel():
            g = _owned_columns(g_digits, setup).to(weight.dtype)  # [N, owned number tokens]
            grad_hidden += g @ weight[setup.columns]
            grad_weight.index_add_(0, setup.columns, (g.T @ hidden).to(grad_weight.dtype))
        return grad_hidden, grad_weight, None, None, None, None


def _setup(target, digit_ids, embedding, vslice, local_vocab: int, dtype) -> _Setup:
    if vslice.size != local_vocab:
        raise ValueError(
            f"the vocabulary slice [{vslice.start}, {vslice.end}) has {vslice.size} columns, the logits {local_vocab}"
        )
    if embedding is not None:
        if embedding.shape[0] == vslice.vocab_size and vslice.size != vslice.vocab_size:
            embedding = embedding[vslice.start : vslice.end]
        if embedding.shape[0] != vslice.size:
            raise ValueError(
                f"the cost embedding has {embedding.shape[0]} rows; expected the {vslice.size} rows of "
                f"this vocabulary slice (or all {vslice.vocab_size})"
            )
        embedding = embedding.to(dtype)
    return _Setup(vslice, target, digit_ids, embedding)


def logit_statistics(
    logits: torch.Tensor,
    target: torch.Tensor,
    digit_ids: Optional[Sequence[int]] = None,
    embedding: Optional[torch.Tensor] = None,
    vslice: Optional[VocabSlice] = None,
    chunk_size: int = 2048,
) -> LogitStats:
    """Statistics from logits [N, V_local] (any float dtype; all V columns without ``vslice``),
    computed ``chunk_size`` rows at a time (bounds the fp32 temporaries, not the result).

    ``target`` [N] int64 global ids (-100 ignored); ``digit_ids`` the C global number-token ids
    (``DigitVocab.number_ids``) or None;
    ``embedding`` the cost embedding [V or V_local, H] or None. Outputs in the compute dtype.
    """
    vslice = vslice or VocabSlice.full(logits.shape[-1])
    setup = _setup(target, digit_ids, embedding, vslice, logits.shape[-1], compute_dtype(logits.dtype))
    # Compiled, one chunk: the row loop would specialise the graph on N, and inductor fuses the
    # fp32 upcast into its kernels, so the temporaries the chunks bound are not materialised.
    num_chunks = 1 if torch.compiler.is_compiling() else None
    return LogitStats(*_FromLogits.apply(logits, setup, chunk_size, num_chunks))


def hidden_statistics(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    digit_ids: Optional[Sequence[int]] = None,
    embedding: Optional[torch.Tensor] = None,
    vslice: Optional[VocabSlice] = None,
    chunk_size: int = 256,
    eager_ce_grad: bool = False,
    num_chunks: Optional[int] = None,
) -> LogitStats:
    """Statistics of the logits ``hidden @ weight.T`` computed ``chunk_size`` tokens at a time.

    ``hidden`` [N, H], ``weight`` [V_local, H] (the LM-head rows of ``vslice``); gradients flow to
    both. Peak extra memory: one chunk's fp32 logits and their gradient (``chunk_size x V_local``),
    the [N, H] and [V_local, H] gradients in the inputs' dtype; never ``N x V`` nor an fp32 [V, H].
    ``eager_ce_grad`` promises that the caller's loss gives every valid token's ``ce`` the same
    gradient (a plain token mean/sum of CE): the CE gradients are then formed in the forward pass
    and the backward needs no second pass over the vocabulary (see :class:`_FromHidden`).
    ``num_chunks`` (for torch.compile over varying lengths) replaces ``chunk_size``: exactly that
    many chunks of ``ceil(N / num_chunks)`` tokens (the rows padded with ignored tokens), so one
    graph serves every N; size it for the longest batch, ``ceil(N_max / chunk_size)``.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden [N, H] and weight [V, H] do not fit: {tuple(hidden.shape)}, {tuple(weight.shape)}")
    vslice = vslice or VocabSlice.full(weight.shape[0])
    n_rows = hidden.shape[0]
    if num_chunks is not None:
        if num_chunks < 1:
            raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
        pad = -n_rows % num_chunks
        hidden = torch.nn.functional.pad(hidden, (0, 0, 0, pad))
        target = torch.nn.functional.pad(target, (0, pad), value=IGNORE_INDEX)
    setup = _setup(target, digit_ids, embedding, vslice, weight.shape[0], compute_dtype(hidden.dtype))
    eager = (
        eager_ce_grad
        and embedding is None
        and torch.is_grad_enabled()
        and (hidden.requires_grad or weight.requires_grad)
    )
    stats = _FromHidden.apply(hidden, weight, setup, chunk_size, num_chunks, eager)
    if num_chunks is not None:
        stats = tuple(None if t is None else t[:n_rows] for t in stats)
    return LogitStats(*stats)
