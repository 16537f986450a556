"""A character-level tokenizer for the arithmetic benchmark, built with the ``tokenizers`` library,
and the encoding of problems into training examples.

Every character is its own token (digits one per token, as in Qwen2 / DeepSeek / Llama-2), so
:meth:`del_core.DigitVocab.from_tokenizer` and every loss path run exactly as on a real
single-digit tokenizer. Special tokens: ``<pad>`` (id 0), ``<eos>`` (1), ``<unk>`` (2).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from del_core.data.synthetic import Problem, answer_text
from del_core.data.tokenized import Example, collate
from del_core.spans import IGNORE_INDEX

SPECIALS = ("<pad>", "<eos>", "<unk>")
# Digits, the point, the operators, the space and the letters of unit words and prompts.
CHARACTERS = string.digits + ".+-*= " + string.ascii_lowercase


def build_tokenizer():
    """A ``PreTrainedTokenizerFast`` over :data:`CHARACTERS` (one token each) and :data:`SPECIALS`;
    ids: specials first, then the characters in order (so '0'..'9' are ids 3..12, '.' is 13)."""
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + tuple(CHARACTERS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", name_or_path="arithmetic-chars"
    )


def encode_examples(problems: Sequence[Problem], tokenizer: Any) -> list[Example]:
    """One :class:`Example` per problem: question + answer (:func:`answer_text`) + EOS; position t
    predicts token t + 1 where that token is in the answer or EOS, else -100. Tokenised in two
    batched calls."""
    prompts = tokenizer([p.question for p in problems], add_special_tokens=False)["input_ids"]
    answers = tokenizer([answer_text(p.answer) for p in problems], add_special_tokens=False)["input_ids"]
    examples = []
    for prompt, answer in zip(prompts, answers):
        answer = [*answer, tokenizer.eos_token_id]
        examples.append(Example(prompt + answer, [IGNORE_INDEX] * (len(prompt) - 1) + answer + [IGNORE_INDEX]))
    return examples


def encode_batch(problems: Sequence[Problem], tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids [B, T], aligned targets [B, T]) of :func:`encode_examples`, right-padded by the
    project's :func:`del_core.data.tokenized.collate`."""
    batch = collate(encode_examples(problems, tokenizer), tokenizer.pad_token_id)
    return batch.input_ids, batch.targets
