"""Chat data on the real SmolLM2-135M-Instruct chat template: which tokens are targets (exactly
the assistant contents and their end-of-turn token), ShareGPT rows, rows that cannot be trained
(named by file, row and field), and evaluation prompts equal to the training prompt prefix."""

from __future__ import annotations

import copy
import json

import pytest

from del_core.data import DataError, encode, load_rows
from del_core.data.prompting import PromptFormat, format_prompt
from del_core.evaluation.benchmarks.config import load_eval_config
from del_core.evaluation.benchmarks.prompts import CHOICE_RESPONSE_PREFIX, PROGRAM_SUFFIX, choice_prompt, program_prompt
from del_core.evaluation.question import Record
from del_core.spans import IGNORE_INDEX

END = "<|im_end|>"
SYSTEM = "You are a careful calculator."
CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is 12 times 4?"},
    {"role": "assistant", "content": "12 * 4 = 48\nThe answer is 48."},
    {"role": "user", "content": "And 48 plus 7?"},
    {"role": "assistant", "content": "48 + 7 = 55. The answer is 55."},
]


def target_segments(tokenizer, example) -> list[str]:
    """The decoded runs of consecutive target tokens (each run: one trained stretch of text)."""
    targeted = [t + 1 for t, target in enumerate(example.targets) if target != IGNORE_INDEX]
    for t in targeted:  # targets are aligned: position t predicts token t + 1
        assert example.targets[t - 1] == example.input_ids[t]
    runs: list[list[int]] = []
    for position in targeted:
        if runs and runs[-1][-1] == position - 1:
            runs[-1].append(position)
        else:
            runs.append([position])
    return [tokenizer.decode([example.input_ids[p] for p in run]) for run in runs]


def test_alpaca_row_under_chat_targets_the_output_and_end_of_turn_only(smollm2):
    row = {"instruction": "What is 689 times 43?", "input": "", "output": "689 * 43 = 29627\nThe answer is 29627."}
    example = encode(row, smollm2, 512, "chat")
    rendered = smollm2.apply_chat_template(
        [{"role": "user", "content": row["instruction"]}, {"role": "assistant", "content": row["output"]}],
        tokenize=False,
    )
    assert smollm2.decode(example.input_ids) == rendered  # the template's own text, nothing added
    assert rendered.endswith(END + "\n")  # the newline after the end-of-turn token is not trained
    assert target_segments(smollm2, example) == [row["output"] + END]
    assert example.targets[-1] == IGNORE_INDEX


def test_multi_turn_targets_both_assistant_turns_and_never_system_or_user(smollm2):
    example = encode({"messages": CONVERSATION}, smollm2, 1024, "chat")
    assert target_segments(smollm2, example) == [CONVERSATION[2]["content"] + END, CONVERSATION[4]["content"] + END]
    trained = "".join(target_segments(smollm2, example))
    for turn in (CONVERSATION[0], CONVERSATION[1], CONVERSATION[3]):
        assert turn["content"] not in trained


def test_truncation_cuts_the_conversation_and_never_predicts_past_the_cut(smollm2):
    full = encode({"messages": CONVERSATION}, smollm2, 1024, "chat")
    cut = encode({"messages": CONVERSATION}, smollm2, len(full.input_ids) - 5, "chat")
    assert cut.truncated == 5 and cut.input_ids == full.input_ids[:-5]
    assert cut.targets == full.targets[: len(cut.targets) - 1] + [IGNORE_INDEX]


def test_sharegpt_rows_are_normalised_to_messages(tmp_path, smollm2):
    sharegpt = {
        "conversations": [
            {"from": "system", "value": SYSTEM},
            {"from": "human", "value": CONVERSATION[1]["content"]},
            {"from": "gpt", "value": CONVERSATION[2]["content"]},
            {"from": "human", "value": CONVERSATION[3]["content"]},
            {"from": "gpt", "value": CONVERSATION[4]["content"]},
        ]
    }
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps(sharegpt) + "\n" + json.dumps({"messages": CONVERSATION}) + "\n")
    first, second = load_rows(path)
    assert first == second == {"messages": CONVERSATION}
    assert encode(first, smollm2, 1024, "chat") == encode({"messages": CONVERSATION}, smollm2, 1024, "chat")


@pytest.mark.parametrize(
    "row, message",
    [
        ({"messages": [{"role": "user"}, {"role": "assistant", "content": "1"}]}, r"messages\[0\]: field 'content'"),
        ({"messages": [{"role": "robot", "content": "a"}]}, r"messages\[0\]: field 'role' is 'robot'"),
        ({"conversations": [{"from": "bot", "value": "a"}]}, r"conversations\[0\]: field 'from' is 'bot'"),
        ({"messages": [{"role": "user", "content": "a"}]}, r"field 'messages' has no assistant turn"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": " "}]},
            r"field 'messages' has no assistant turn with text",
        ),
        ({"messages": []}, r"field 'messages' must be a non-empty list"),
        ({"messages": [{"role": "user", "content": 3}]}, r"messages\[0\]: field 'content' must be text"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]},
            r"messages\[1\]: a system turn may only come first",
        ),
    ],
)
def test_bad_conversations_name_file_row_and_field(tmp_path, row, message):
    path = tmp_path / "chat.jsonl"
    good = {"messages": CONVERSATION}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=rf"chat\.jsonl: row 2: {message}"):
        load_rows(path)


def test_alpaca_format_takes_single_turn_conversations_and_refuses_others(smollm2):
    single = {"messages": [{"role": "user", "content": "What is 2 + 2?"}, CONVERSATION[2]]}
    alpaca = {"instruction": "What is 2 + 2?", "input": "", "output": CONVERSATION[2]["content"]}
    assert encode(single, smollm2, 512) == encode(alpaca, smollm2, 512)
    with pytest.raises(DataError, match=r"data\.jsonl: row 7: a conversation of turns .*prompt_format=chat"):
        encode({"messages": CONVERSATION}, smollm2, 512, "alpaca", where="data.jsonl: row 7")


def test_a_tokenizer_without_chat_template_is_refused_in_one_line(smollm2):
    plain = copy.deepcopy(smollm2)
    plain.chat_template = None
    with pytest.raises(DataError, match="needs a tokenizer with a chat template"):
        encode({"messages": CONVERSATION}, plain, 512, "chat")
    with pytest.raises(DataError, match="needs a tokenizer with a chat template"):
        PromptFormat("chat", plain)


def test_a_template_that_rewrites_earlier_turns_is_refused_naming_the_row(smollm2):
    """A template whose rendering of a prefix is no prefix of the whole: the assistant tokens cannot
    be located from prefixes, and encoding says so instead of training on the wrong tokens."""
    rewriting = copy.deepcopy(smollm2)
    rewriting.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if loop.last %}{{ m['content'] }}"
        "{% else %}{{ m['content'] | upper }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(DataError, match=r"d\.jsonl: row 3: messages\[2\]: .*not a prefix"):
        encode({"messages": CONVERSATION}, rewriting, 512, "chat", where="d.jsonl: row 3")


def test_evaluation_prompt_under_chat_is_the_training_prompt_prefix(smollm2):
    chat = PromptFormat("chat", smollm2)
    row = {"instruction": "What is 689 times 43?", "input": "", "output": "The answer is 29627."}
    example = encode(row, smollm2, 512, "chat")
    prompt = smollm2(chat.question(row["instruction"]), add_special_tokens=False)["input_ids"]
    assert prompt == example.input_ids[: len(prompt)]
    # The first target is predicted from the prompt's last position: the answer starts right there.
    assert example.targets[len(prompt) - 2] == IGNORE_INDEX != example.targets[len(prompt) - 1]
    assert chat.question(row["instruction"]).endswith("<|im_start|>assistant\n")
    # The benchmark prompts go through the same builder.
    record = Record("gsm8k", 0, row["instruction"], "29627", "number")
    assert program_prompt(record, chat) == chat.question(row["instruction"] + PROGRAM_SUFFIX)
    assert choice_prompt(record, chat) == chat.question(row["instruction"]) + CHOICE_RESPONSE_PREFIX
    assert program_prompt(record) == format_prompt(row["instruction"] + PROGRAM_SUFFIX)  # alpaca by default


def test_a_system_prompt_opens_the_question_as_it_opened_the_trained_rows(smollm2):
    """PromptFormat(system_prompt=...) asks a question exactly as a row trained with that system turn
    begins: the prompt is the row's token prefix up to its first target, for an empty turn and a
    worded one; without it the template writes its default system turn (a different prefix)."""
    instruction, output = "What is 689 times 43?", "689 * 43 = 29627"
    for system in ("", SYSTEM):
        chat = PromptFormat("chat", smollm2, system)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": instruction}]
        example = encode({"messages": [*messages, {"role": "assistant", "content": output}]}, smollm2, 512, "chat")
        prompt = smollm2(chat.question(instruction), add_special_tokens=False)["input_ids"]
        first_target = next(t for t, target in enumerate(example.targets) if target != IGNORE_INDEX)
        assert prompt == example.input_ids[: first_target + 1]
        assert chat.question(instruction).startswith(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n")
    default = PromptFormat("chat", smollm2).question(instruction)
    assert default != PromptFormat("chat", smollm2, "").question(instruction)
    assert default.startswith("<|im_start|>system\nYou are a helpful AI assistant")
    with pytest.raises(DataError, match="a system prompt needs prompt_format chat"):
        PromptFormat("alpaca", None, "")


def test_the_evaluation_config_takes_a_system_prompt_and_keeps_an_empty_one_from_yaml(tmp_path):
    from del_core.config import ConfigError

    recipe = tmp_path / "eval.yaml"
    recipe.write_text('model: smollm2\nprompt_format: chat\nsystem_prompt: ""\n')
    assert load_eval_config([str(recipe)]).system_prompt == ""
    assert load_eval_config([str(recipe), "system_prompt=Be brief."]).system_prompt == "Be brief."
    assert load_eval_config(["smollm2", "prompt_format=chat"]).system_prompt is None
    with pytest.raises(ConfigError, match="system_prompt needs prompt_format chat"):
        load_eval_config(["smollm2", "system_prompt=Be brief."])


def test_the_evaluation_config_takes_the_prompt_format():
    assert load_eval_config(["smollm2", "prompt_format=chat"]).prompt_format == "chat"
    assert load_eval_config(["smollm2"]).prompt_format == "alpaca"
    from del_core.config import ConfigError

    with pytest.raises(ConfigError, match="prompt_format must be one of alpaca, chat"):
        load_eval_config(["smollm2", "prompt_format=sharegpt"])


def test_a_held_out_rows_prompt_is_its_training_prefix_before_the_last_answer(smollm2):
    """PromptFormat.row_prompt (the prompt of a held-out row to answer greedily): for a conversation
    the template of every turn before the last assistant turn, ending where that turn's content starts."""
    chat = PromptFormat("chat", smollm2)
    example = encode({"messages": CONVERSATION}, smollm2, 1024, "chat")
    prompt = smollm2(chat.row_prompt({"messages": CONVERSATION}), add_special_tokens=False)["input_ids"]
    assert prompt == example.input_ids[: len(prompt)]
    assert smollm2.decode(example.input_ids[len(prompt) :]) == CONVERSATION[4]["content"] + END + "\n"
    row = {"instruction": "What is 2 + 2?", "input": "", "output": "4"}
    assert chat.row_prompt(row) == chat.question("What is 2 + 2?")
    assert PromptFormat().row_prompt(row) == format_prompt("What is 2 + 2?")
