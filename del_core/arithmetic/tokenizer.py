"""A character-level tokenizer for the arithmetic benchmark, built with the ``tokenizers`` library.

Every character is its own token (digits one per token, as in Qwen2 / DeepSeek / Llama-2), so
:meth:`del_core.DigitVocab.from_tokenizer` and every loss path run exactly as on a real
single-digit tokenizer. Special tokens: ``<pad>`` (id 0), ``<eos>`` (1), ``<unk>`` (2).
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

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
