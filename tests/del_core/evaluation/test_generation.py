"""The one greedy generation path (del_core.evaluation.generation.generate_greedy), with a stub model
that answers each prompt by its last word, and the real Qwen2 tokenizer."""

from __future__ import annotations

import copy

import torch

from del_core.evaluation.generation import STOP, cut_at_stop, generate_greedy


class EchoLM:
    """Answers each row with " ok <last word of the prompt>" and a next Alpaca section after it."""

    def __init__(self, tokenizer):
        self.tokenizer, self.training, self.calls = tokenizer, True, []

    def eval(self):
        self.training = False
        return self

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def generate(self, input_ids, attention_mask, **options):
        assert not self.training and not torch.is_grad_enabled()
        self.calls.append({"input_ids": input_ids, "attention_mask": attention_mask, **options})
        rows = []
        for ids, mask in zip(input_ids, attention_mask):
            word = self.tokenizer.decode(ids[mask.bool()]).split()[-1]
            answer = self.tokenizer(f" ok {word}\n### Instruction:\nmore", add_special_tokens=False)["input_ids"]
            rows.append(ids.tolist() + answer)
        width = max(map(len, rows))
        pad = options["pad_token_id"]
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def test_outputs_in_prompt_order_cut_at_stop_with_modes_and_padding_restored(qwen2_tokenizer):
    tokenizer = copy.deepcopy(qwen2_tokenizer)
    tokenizer.pad_token = None  # a tokenizer without one gets EOS
    lm = EchoLM(tokenizer)
    prompts = ["a short alpha", "a much much longer prompt ending in beta", "gamma", "one two delta", "epsilon"]
    outputs = generate_greedy(lm, tokenizer, prompts, max_new_tokens=7, device="cpu", batch_size=2, synced_gpus=True)
    assert outputs == [" ok alpha", " ok beta", " ok gamma", " ok delta", " ok epsilon"]
    assert lm.training and tokenizer.padding_side == "right" and tokenizer.pad_token_id == tokenizer.eos_token_id
    assert [len(call["input_ids"]) for call in lm.calls] == [2, 2, 1]
    for call in lm.calls:
        assert call["synced_gpus"] is True and call["max_new_tokens"] == 7 and call["do_sample"] is False
        assert bool(call["attention_mask"][:, -1].all())  # left padding: every row ends at its last token
    assert not bool(lm.calls[0]["attention_mask"][:, 0].all())  # the longest two differ: the shorter is padded
    lm.eval()
    assert generate_greedy(lm, tokenizer, ["x"], 3, "cpu") == [" ok x"] and not lm.training
    assert lm.calls[-1]["synced_gpus"] is False
    assert generate_greedy(lm, tokenizer, [], 3, "cpu") == []


def test_cut_at_stop_keeps_the_text_before_the_first_marker():
    assert cut_at_stop("42\n### Response:\nmore\n### Instruction") == "42"
    assert cut_at_stop("no marker") == "no marker"
    assert all(cut_at_stop(f"x{marker}y") == "x" for marker in STOP)
