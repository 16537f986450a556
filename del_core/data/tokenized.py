"""Tokenised training examples: prompt masking, truncation, shuffling, packing and collation.

Under ``prompt_format=alpaca`` each row becomes

    input_ids = prompt + output + EOS          (prompt: :func:`del_core.data.prompting.format_prompt`)
    targets[t] = input_ids[t + 1] for positions whose next token is in the output or EOS, else -100

and under ``chat`` the chat template's tokens of the conversation, whose targets are the assistant
turns' contents and end-of-turn markers (:func:`del_core.data.chat.conversation_tokens`).

so ``targets`` is already aligned with the positions that predict it (the losses of del_core take
it as is; nothing shifts later). Packing puts several examples in one sequence: position ids
restart at 0 for each example and the last position of each example predicts nothing, so neither
attention (with position-id aware attention) nor number spans cross examples. Padding-free
collation (``collate(..., padding_free=True)``) joins the examples of one batch the same way into a
single row: the batch's examples and losses, without padding.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.chat import MaskedTokens, conversation_tokens
from del_core.data.normalisers import target_counts
from del_core.data.prompting import (
    ALPACA_FORMAT,
    PROMPT_FORMATS,
    alpaca_fields,
    alpaca_messages,
    prompt_ids,
    require_chat_template,
)
from del_core.data.rows import DataError, is_conversation
from del_core.losses import scored_positions
from del_core.spans import IGNORE_INDEX, NumberSpans, invalid_labels, number_spans
from del_core.vocab import DigitVocab


@dataclass
class Example:
    """One tokenized row. ``targets`` is aligned with ``input_ids`` (see the module docstring)."""

    input_ids: list[int]
    targets: list[int]
    truncated: int = 0  # tokens cut off by max_length


@dataclass
class EncodeReport:
    """What encoding did to a data set."""

    examples: int = 0
    truncated_examples: int = 0
    truncated_tokens: int = 0
    target_tokens: int = 0
    dropped_examples: int = 0  # no target token left after truncation

    @classmethod
    def from_counts(cls, truncated: Sequence[int], targets: Sequence[int]) -> EncodeReport:
        """The report of examples with these cut-off token counts and target token counts."""
        return cls(
            examples=len(truncated),
            truncated_examples=sum(1 for n in truncated if n),
            truncated_tokens=int(sum(truncated)),
            target_tokens=int(sum(targets)),
            dropped_examples=sum(1 for n in targets if not n),
        )

    def summary(self) -> str:
        share = self.truncated_examples / max(self.examples, 1)
        return (
            f"{self.examples} examples, {self.target_tokens} target tokens; {self.truncated_examples} "
            f"truncated ({share:.1%}), {self.truncated_tokens} tokens cut"
        )


def _alpaca_tokens(row: dict, tokenizer: Any, where: str) -> MaskedTokens:
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no EOS token; set tokenizer.eos_token")
    fields = alpaca_fields(row, where)
    prompt = prompt_ids(tokenizer, ALPACA_FORMAT.question(fields["instruction"], fields.get("input", "")))
    response = tokenizer(fields["output"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return MaskedTokens(prompt + response, [False] * len(prompt) + [True] * len(response))


def _example(tokens: MaskedTokens, max_length: int) -> Example:
    """Targets aligned with the positions that predict them, cut to ``max_length`` tokens."""
    ids, is_target = tokens.input_ids, tokens.is_target
    # Position t predicts token t + 1; the last position predicts nothing.
    targets = [ids[t + 1] if is_target[t + 1] else IGNORE_INDEX for t in range(len(ids) - 1)] + [IGNORE_INDEX]
    cut = max(0, len(ids) - max_length)
    if cut:
        ids, targets = ids[:max_length], targets[: max_length - 1] + [IGNORE_INDEX]
    return Example(ids, targets, cut)


def encode(row: dict, tokenizer: Any, max_length: int, prompt_format: str = "alpaca", where: str = "row") -> Example:
    """Tokenize one validated row (:func:`del_core.data.rows.check_row`) under ``prompt_format``:
    only the response (alpaca: output + EOS; chat: the assistant turns) is targeted, cut to
    ``max_length`` tokens. :class:`DataError` names ``where`` for a row the format cannot encode."""
    if prompt_format not in PROMPT_FORMATS:
        raise DataError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    if prompt_format == "alpaca":
        return _example(_alpaca_tokens(row, tokenizer, where), max_length)
    require_chat_template(tokenizer)
    messages = row["messages"] if is_conversation(row) else alpaca_messages(row)
    return _example(conversation_tokens(messages, tokenizer, where), max_length)


def target_count(example: Example) -> int:
    """The tokens ``example`` trains on (0: its response was cut away; it is dropped)."""
    return sum(t != IGNORE_INDEX for t in example.targets)


def encode_all(
    rows: Iterable[dict], tokenizer: Any, max_length: int, prompt_format: str = "alpaca"
) -> tuple[list[Example], EncodeReport]:
    """Encode every row; examples whose response is cut away entirely are dropped and counted."""
    examples = [encode(row, tokenizer, max_length, prompt_format, f"row {i}") for i, row in enumerate(rows)]
    counts = [target_count(example) for example in examples]
    report = EncodeReport.from_counts([example.truncated for example in examples], counts)
    return [example for example, n in zip(examples, counts) if n], report


def shuffled(items: Sequence[Any], seed: int) -> list[Any]:
    """A permutation of ``items`` that depends on ``seed`` only."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in order]


@dataclass
class Packed:
    """Several examples in one sequence; ``lengths`` are their token counts, in order."""

    input_ids: list[int]
    targets: list[int]
    position_ids: list[int]
    lengths: list[int]


def pack_groups(lengths: Sequence[int], max_length: int) -> list[list[int]]:
    """Greedy packing in order: the positions of ``lengths`` each sequence holds; an example goes
    into the current sequence while it fits."""
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, n in enumerate(lengths):
        if n > max_length:
            raise DataError(
                f"an example of {n} tokens exceeds max_length {max_length}; encode with the same max_length"
            )
        if current and used + n > max_length:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += n
    if current:
        groups.append(current)
    return groups


def join(examples: Sequence[Example]) -> Packed:
    """One packed sequence of ``examples``, in order. Each must end with -100 (as :func:`encode`
    makes them): nothing predicts across, so neither number spans nor number runs cross examples;
    ``ValueError`` naming the example otherwise."""
    packed = Packed([], [], [], [])
    for index, example in enumerate(examples):
        if not isinstance(example, Example):
            raise ValueError(f"item {index} is a {type(example).__name__}, not an Example: only examples are joined")
        if example.targets[-1] != IGNORE_INDEX:
            raise ValueError(
                f"example {index}: its last position predicts token {example.targets[-1]}, not {IGNORE_INDEX}; "
                "joined, it would predict the next example's first token"
            )
        n = len(example.input_ids)
        packed.input_ids += example.input_ids
        packed.targets += example.targets
        packed.position_ids += list(range(n))
        packed.lengths.append(n)
    return packed


def pack(examples: Sequence[Example], max_length: int) -> list[Packed]:
    """The examples packed greedily in order (:func:`pack_groups`)."""
    groups = pack_groups([len(e.input_ids) for e in examples], max_length)
    return [join([examples[i] for i in group]) for group in groups]


@dataclass
class TokenBatch:
    """A right-padded batch; every tensor is [B, T] int64 except ``attention_mask`` (int64 0/1).

    ``targets`` holds -100 (IGNORE_INDEX) on prompt, padding and packed-example boundaries;
    ``position_ids`` restart at 0 for each packed example. ``spans`` are the number spans of
    ``targets`` (:func:`del_core.number_spans`), computed once per batch by :meth:`with_spans`
    where the batch is made, so neither the normaliser count nor the loss recomputes them.
    ``scored`` [M] int64, ascending: the flat indices into ``targets.reshape(-1)`` of the scored
    positions (not -100), found on the host by :meth:`with_scored` for a compacted loss path
    (``del_core.losses.CompactedPath``), which on the device would cost a host sync. They index
    this batch's [B, T] as it is: a batch cut or padded to another shape drops them.
    """

    input_ids: torch.Tensor
    targets: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    spans: Optional[NumberSpans] = None
    scored: Optional[torch.Tensor] = None

    def with_spans(self, vocab: Optional[DigitVocab]) -> TokenBatch:
        """This batch with its number spans (none without a digit vocabulary)."""
        spans = number_spans(self.targets, vocab) if vocab is not None else None
        return dataclasses.replace(self, spans=spans)

    def with_scored(self) -> TokenBatch:
        """This batch with its scored positions (:func:`del_core.losses.scored_positions` of the
        targets; on host memory, no device sync)."""
        return dataclasses.replace(self, scored=scored_positions(self.targets))

    def to(self, device: torch.device | str) -> TokenBatch:
        """This batch on ``device`` (a new batch; this one is unchanged), by :func:`to_device`."""
        return self._map(lambda t: to_device(t, torch.device(device)))

    def _map(self, move: Callable[[torch.Tensor], torch.Tensor]) -> TokenBatch:
        spans = NumberSpans(*(move(t) for t in self.spans)) if self.spans is not None else None
        scored = move(self.scored) if self.scored is not None else None
        return TokenBatch(
            move(self.input_ids), move(self.targets), move(self.attention_mask), move(self.position_ids), spans, scored
        )

    def counts(self) -> torch.Tensor:
        """``[target tokens, digit targets, attended tokens]`` as one int64 tensor on the batch's
        device, not read back; the first two are :func:`del_core.data.normalisers.target_counts`
        (digit targets are 0 without spans)."""
        counts = target_counts(self.targets, spans=self.spans)  # the loss's normalisers
        return torch.cat([counts, self.attention_mask.sum().to(counts.dtype).reshape(1)])


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` without the host waiting for the stream: on an accelerator
    through page-locked memory and a non-blocking copy (from pageable memory a copy blocks); as
    is on the CPU."""
    if device.type == "cpu":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def check_target_ids(batches: Sequence[TokenBatch], vocab_size: int) -> None:
    """Every target of ``batches`` (host copies) is IGNORE_INDEX or a token id in ``[0, vocab_size)``;
    otherwise ``ValueError`` naming the micro-batch, row, position and id of the first bad one.
    One read of host memory for all the batches, none of the device."""
    bad = [invalid_labels(b.targets, vocab_size) for b in batches]
    if not bad or not bool(torch.stack([mask.any() for mask in bad]).any()):
        return
    index = next(i for i, mask in enumerate(bad) if mask.any())
    row, position = (int(v) for v in bad[index].nonzero()[0])
    raise ValueError(
        f"micro-batch {index}, row {row}, position {position}: target id {int(batches[index].targets[row, position])} "
        f"is neither a token id of the model's output vocabulary [0, {vocab_size}) nor the ignore index "
        f"{IGNORE_INDEX} (is the tokenizer larger than the model's vocabulary?)"
    )


def collate(items: Sequence[Example | Packed], pad_id: int, padding_free: bool = False) -> TokenBatch:
    """Right-padded :class:`TokenBatch` of examples or packed sequences; with ``padding_free`` the
    examples joined in order into one row [1, sum of their lengths] (:func:`join`: position ids
    restarting per example, no padding), which a model run without an attention mask computes as
    the padded batch (same targets, spans and counts)."""
    if padding_free:
        items = [join(items)]
    width = max(len(item.input_ids) for item in items)
    shape = (len(items), width)
    batch = TokenBatch(
        input_ids=torch.full(shape, pad_id, dtype=torch.long),
        targets=torch.full(shape, IGNORE_INDEX, dtype=torch.long),
        attention_mask=torch.zeros(shape, dtype=torch.long),
        position_ids=torch.zeros(shape, dtype=torch.long),
    )
    for i, item in enumerate(items):
        n = len(item.input_ids)
        batch.input_ids[i, :n] = torch.tensor(item.input_ids)
        batch.targets[i, :n] = torch.tensor(item.targets)
        batch.attention_mask[i, :n] = 1
        positions = item.position_ids if isinstance(item, Packed) else list(range(n))
        batch.position_ids[i] = continued_positions(torch.tensor([positions]), width)[0]
    return batch


def continued_positions(position_ids: torch.Tensor, length: int) -> torch.Tensor:
    """``position_ids`` [B, T] int64 right-padded to ``length`` positions, each row's padding
    continuing its last position (p + 1, p + 2, ...). The padding so joins the row's last example
    instead of opening new ones: a row of one example stays one causal block, and attention that
    reads packed examples from the position ids (flash-attention, the packed SDPA under sequence
    parallelism) builds no block mask for it. Padded positions predict nothing and no real
    position attends to a later one, so no real position's output changes."""
    missing = length - position_ids.shape[1]
    if missing < 0:
        raise ValueError(f"cannot pad {position_ids.shape[1]} position ids to {length}")
    steps = torch.arange(1, missing + 1, dtype=position_ids.dtype, device=position_ids.device)
    return torch.cat([position_ids, position_ids[:, -1:] + steps], dim=1)
