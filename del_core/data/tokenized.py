"""Tokenised training examples: prompt masking, truncation, shuffling, packing and collation.

Each row becomes

    input_ids = prompt + output + EOS          (prompt: :func:`del_core.data.prompting.format_prompt`)
    targets[t] = input_ids[t + 1] for positions whose next token is in the output or EOS, else -100

so ``targets`` is already aligned with the positions that predict it (the losses of del_core take
it as is; nothing shifts later). Packing puts several examples in one sequence: position ids
restart at 0 for each example and the last position of each example predicts nothing, so neither
attention (with position-id aware attention) nor number spans cross examples.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from del_core.data.prompting import format_prompt
from del_core.data.rows import DataError
from del_core.spans import IGNORE_INDEX


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

    def summary(self) -> str:
        share = self.truncated_examples / max(self.examples, 1)
        return (
            f"{self.examples} examples, {self.target_tokens} target tokens; {self.truncated_examples} "
            f"truncated ({share:.1%}), {self.truncated_tokens} tokens cut"
        )


def encode(row: dict[str, str], tokenizer: Any, max_length: int) -> Example:
    """Tokenize one row: prompt masked, EOS appended, cut to ``max_length`` tokens."""
    if tokenizer.eos_token_id is None:
        raise DataError("the tokenizer has no EOS token; set tokenizer.eos_token")
    prompt = tokenizer(format_prompt(row["instruction"], row.get("input", "")), add_special_tokens=False)["input_ids"]
    response = tokenizer(row["output"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = prompt + response
    # Position t predicts token t + 1: targets are the response tokens, shifted by one.
    targets = [IGNORE_INDEX] * (len(prompt) - 1) + response + [IGNORE_INDEX]
    cut = max(0, len(ids) - max_length)
    if cut:
        ids, targets = ids[:max_length], targets[: max_length - 1] + [IGNORE_INDEX]
    return Example(ids, targets, cut)


def encode_all(rows: Iterable[dict[str, str]], tokenizer: Any, max_length: int) -> tuple[list[Example], EncodeReport]:
    """Encode every row; examples whose response is cut away entirely are dropped and counted."""
    report = EncodeReport()
    examples = []
    for row in rows:
        example = encode(row, tokenizer, max_length)
        report.examples += 1
        if example.truncated:
            report.truncated_examples += 1
            report.truncated_tokens += example.truncated
        n_targets = sum(t != IGNORE_INDEX for t in example.targets)
        if n_targets:
            examples.append(example)
            report.target_tokens += n_targets
    return examples, report


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


def pack(examples: Sequence[Example], max_length: int) -> list[Packed]:
    """Greedy packing in order: an example goes into the current sequence while it fits."""
    sequences: list[Packed] = []
    current = Packed([], [], [], [])
    for example in examples:
        n = len(example.input_ids)
        if n > max_length:
            raise DataError(f"an example of {n} tokens exceeds max_length {max_length}; encode with the same max_length")
        if current.lengths and len(current.input_ids) + n > max_length:
            sequences.append(current)
            current = Packed([], [], [], [])
        current.input_ids += example.input_ids
        current.targets += example.targets  # each ends with -100: nothing predicts across examples
        current.position_ids += list(range(n))
        current.lengths.append(n)
    if current.lengths:
        sequences.append(current)
    return sequences


def collate(items: Sequence[Example | Packed], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded tensors [B, T]: input_ids, targets (-100 on padding), attention_mask,
    position_ids (restarting per packed example)."""
    width = max(len(item.input_ids) for item in items)
    batch = {
        "input_ids": torch.full((len(items), width), pad_id, dtype=torch.long),
        "targets": torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long),
        "attention_mask": torch.zeros((len(items), width), dtype=torch.long),
        "position_ids": torch.zeros((len(items), width), dtype=torch.long),
    }
    for i, item in enumerate(items):
        n = len(item.input_ids)
        batch["input_ids"][i, :n] = torch.tensor(item.input_ids)
        batch["targets"][i, :n] = torch.tensor(item.targets)
        batch["attention_mask"][i, :n] = 1
        positions = item.position_ids if isinstance(item, Packed) else list(range(n))
        batch["position_ids"][i, :n] = torch.tensor(positions)
    return batch
