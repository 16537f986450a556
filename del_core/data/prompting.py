"""The prompts of training and evaluation: one builder, :class:`PromptFormat`, for both.

``alpaca`` (the default) is one fixed Alpaca template. The authors' release draws one of 12
templates at random per run, unseeded; this project always uses this one, so training and
evaluation prompts are identical. ``chat`` is the tokenizer's own chat template
(``apply_chat_template``); an Alpaca row is then one user turn (the instruction, and the input
after a blank line) answered by one assistant turn (the output).

Training builds the prompt of an Alpaca row with :meth:`PromptFormat.question` under ``alpaca``
and renders every conversation prefix with :func:`render_conversation` under ``chat``; evaluation
asks every question through :meth:`PromptFormat.question`, which under ``chat`` is
:func:`render_conversation` of the one user turn with the generation prompt. So the prompt the
model answers at evaluation is exactly the prefix it was trained to continue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from del_core.data.rows import DataError, is_conversation

PROMPT_FORMATS = ("alpaca", "chat")

ALPACA_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
ALPACA = (
    "Below is an instruction that describes a task. Write a response that appropriately completes "
    "the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)


def format_prompt(instruction: str, input: str = "") -> str:
    """The Alpaca prompt for one MathInstruct-style row; the response follows it directly."""
    if input.strip():
        return ALPACA_WITH_INPUT.format(instruction=instruction, input=input)
    return ALPACA.format(instruction=instruction)


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The token ids of a prompt, as training and every generation back end encode it: the text
    alone, no special tokens added (the templates carry their own structure)."""
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


def user_turn(instruction: str, input: str = "") -> dict[str, str]:
    """The user turn of an Alpaca row under ``chat``: the instruction, then the input after a blank line."""
    text = f"{instruction}\n\n{input}" if input.strip() else instruction
    return {"role": "user", "content": text}


def alpaca_messages(row: dict) -> list[dict[str, str]]:
    """An Alpaca row as a conversation: one user turn answered by one assistant turn."""
    return [user_turn(row["instruction"], row.get("input", "")), {"role": "assistant", "content": row["output"]}]


def alpaca_fields(row: dict, where: str = "row") -> dict[str, str]:
    """An Alpaca row as it is, or a conversation that is one (one user turn, then one assistant
    turn) as instruction and output; :class:`DataError` names ``where`` for any other conversation."""
    if not is_conversation(row):
        return row
    roles = [m["role"] for m in row["messages"]]
    if roles != ["user", "assistant"]:
        raise DataError(
            f"{where}: a conversation of turns {roles} has no Alpaca form (one user turn, then one assistant "
            "turn); train it with data.prompt_format=chat"
        )
    user, assistant = row["messages"]
    return {"instruction": user["content"], "input": "", "output": assistant["content"]}


def require_chat_template(tokenizer: Any) -> None:
    """:class:`DataError` unless ``tokenizer`` carries a chat template (``chat`` needs one)."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise DataError(
            f"prompt_format chat needs a tokenizer with a chat template, and {name} has none; "
            "use prompt_format=alpaca or a tokenizer (model.tokenizer) that has one"
        )


def render_conversation(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool = False) -> str:
    """The chat template's text of ``messages`` (with the assistant's opening when
    ``add_generation_prompt``); tokenised without adding special tokens (the template writes its own)."""
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)


def system_turn(system_prompt: str) -> dict[str, str]:
    """The system turn that opens a conversation trained (and asked) with ``system_prompt``."""
    return {"role": "system", "content": system_prompt}


@dataclass(frozen=True, eq=False)
class PromptFormat:
    """How a question becomes the prompt a model answers: ``alpaca`` or ``chat`` (module docstring).
    ``tokenizer`` is needed by ``chat`` only (its chat template). ``system_prompt`` (chat only) opens
    every question with that system turn (``""``: an empty one), as in rows trained with it; None
    leaves the system turn to the template (SmolLM2's and Qwen2's write a default one)."""

    name: str = "alpaca"
    tokenizer: Optional[Any] = None
    system_prompt: Optional[str] = None

    def __post_init__(self) -> None:
        if self.name not in PROMPT_FORMATS:
            raise DataError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, got {self.name!r}")
        if self.name == "chat":
            require_chat_template(self.tokenizer)
        elif self.system_prompt is not None:
            raise DataError("a system prompt needs prompt_format chat (an Alpaca prompt has no system turn)")

    def question(self, instruction: str, input: str = "") -> str:
        """The prompt of one question (an Alpaca row's instruction and input); the answer follows it."""
        if self.name == "alpaca":
            return format_prompt(instruction, input)
        opening = [] if self.system_prompt is None else [system_turn(self.system_prompt)]
        messages = [*opening, user_turn(instruction, input)]
        return render_conversation(self.tokenizer, messages, add_generation_prompt=True)

    def row_prompt(self, row: dict, where: str = "row") -> str:
        """The prompt of a validated row whose answer is its output (Alpaca) or its last assistant
        turn (a conversation): the prefix of the row's training tokens that generation continues."""
        if self.name == "alpaca" or not is_conversation(row):
            fields = alpaca_fields(row, where)
            return self.question(fields["instruction"], fields.get("input", ""))
        messages = row["messages"]
        last = max(i for i, message in enumerate(messages) if message["role"] == "assistant")
        return render_conversation(self.tokenizer, messages[:last], add_generation_prompt=True)


ALPACA_FORMAT = PromptFormat("alpaca")
