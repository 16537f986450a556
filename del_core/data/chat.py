"""Conversations as training tokens: the chat template's rendering, and which tokens are targets.

The assistant tokens are found from the template itself, not from assumptions about its markup:
for assistant turn i the conversation is rendered up to the assistant's opening
(``messages[:i]`` with the generation prompt) and up to the end of the turn (``messages[:i + 1]``);
the token counts of those two prefixes bound the turn in the tokens of the whole conversation.
Each prefix's tokens must be a prefix of the whole conversation's tokens (a template that rewrites
earlier turns, or a merge across a boundary, would make the bounds wrong): otherwise
:class:`DataError` names the row and the turn.

Inside those bounds the targets are the turn's content and its end-of-turn marker: everything up
to and including the last special token of the span (``<|im_end|>`` for ChatML); what the template
writes after it (a newline) is not trained. A template with no special token in the span has its
whole span trained.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from del_core.data.prompting import prompt_ids, render_conversation
from del_core.data.rows import DataError


@dataclass
class MaskedTokens:
    """A conversation's token ids and, per token, whether the model is trained to produce it."""

    input_ids: list[int]
    is_target: list[bool]


def _rendered_ids(tokenizer: Any, messages: Sequence[dict], generation: bool, where: str) -> list[int]:
    try:
        return prompt_ids(tokenizer, render_conversation(tokenizer, messages, add_generation_prompt=generation))
    except Exception as err:  # the template's own checks (roles must alternate, ...): say which row
        raise DataError(f"{where}: the chat template cannot render this conversation ({err})") from None


def _prefix_length(full: list[int], prefix: list[int], where: str, turn: int) -> int:
    """``len(prefix)`` after checking that ``prefix`` starts ``full``."""
    if full[: len(prefix)] != prefix:
        raise DataError(
            f"{where}: messages[{turn}]: the chat template's tokens of the conversation up to this assistant "
            "turn are not a prefix of the whole conversation's tokens; its assistant tokens cannot be located"
        )
    return len(prefix)


def _end_of_turn(full: list[int], start: int, end: int, special: set[int]) -> int:
    """One past the last special token of ``full[start:end]`` (the end-of-turn marker), else ``end``."""
    for position in range(end - 1, start - 1, -1):
        if full[position] in special:
            return position + 1
    return end


def conversation_tokens(messages: Sequence[dict], tokenizer: Any, where: str) -> MaskedTokens:
    """The tokens of ``messages`` under the tokenizer's chat template with the assistant turns'
    content and end-of-turn marker as targets (module docstring); :class:`DataError` names ``where``."""
    full = _rendered_ids(tokenizer, messages, False, where)
    special = set(tokenizer.all_special_ids)
    is_target = [False] * len(full)
    for turn, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = _prefix_length(full, _rendered_ids(tokenizer, messages[:turn], True, where), where, turn)
        end = _prefix_length(full, _rendered_ids(tokenizer, messages[: turn + 1], False, where), where, turn)
        stop = _end_of_turn(full, start, end, special)
        is_target[start:stop] = [True] * (stop - start)
    return MaskedTokens(full, is_target)
