"""The one greedy generation path (del_core.evaluation.generation.generate_greedy), with a stub model
that answers each prompt by its last word, and the real Qwen2 tokenizer."""

from __future__ import annotations

import copy

import torch

from del_core.data.tokenized import encode
from del_core.evaluation.generation import STOP, HFGenerator, VLLMGenerator, cut_at_stop, generate_greedy


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
        assert call["stop_strings"] == list(STOP) and call["tokenizer"] is tokenizer  # stops while generating
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


def test_prompts_are_encoded_as_in_training(qwen2_tokenizer):
    """The ids generate sees are the prompt ids of a training example (no BOS or other special token)."""
    tokenizer = copy.deepcopy(qwen2_tokenizer)
    lm = EchoLM(tokenizer)
    row = {"instruction": "What is 2 + 3?", "output": "5"}
    from del_core.data.prompting import format_prompt

    prompt = format_prompt(row["instruction"])
    generate_greedy(lm, tokenizer, [prompt], 3, "cpu")
    trained = encode(row, tokenizer, max_length=512).input_ids
    sent = lm.calls[0]["input_ids"][0].tolist()
    assert trained[: len(sent)] == sent and trained[len(sent) :] == tokenizer("5")["input_ids"] + [
        tokenizer.eos_token_id
    ]


class FakeLLM:
    """vLLM's LLM.generate stand-in: records the requests, answers each with a stop marker inside."""

    def __init__(self):
        self.requests = []

    def generate(self, requests, params, use_tqdm=True):
        self.requests.append((requests, params))

        class Output:
            text = "42\n### Instruction:\nmore"

        return [type("Result", (), {"outputs": [Output()]})() for _ in requests]


def test_vllm_gets_token_ids_and_the_per_call_length(qwen2_tokenizer):
    generator = VLLMGenerator.__new__(VLLMGenerator)  # no vLLM here: the engine is a stand-in
    generator.llm, generator.tokenizer, generator.max_new_tokens = FakeLLM(), qwen2_tokenizer, 64
    generator.sampling_params = lambda **options: options
    assert generator.generate(["a prompt"], max_new_tokens=9) == ["42"]
    ((requests, params),) = generator.llm.requests
    assert requests == [{"prompt_token_ids": qwen2_tokenizer("a prompt", add_special_tokens=False)["input_ids"]}]
    assert params == {"temperature": 0.0, "max_tokens": 9, "stop": list(STOP)}
    generator.generate(["x"])
    assert generator.llm.requests[-1][1]["max_tokens"] == 64


def test_hf_generator_length_per_call(monkeypatch):
    seen = []
    monkeypatch.setattr(
        "del_core.evaluation.generation.generate_greedy", lambda lm, tok, prompts, n, device, **kw: seen.append(n) or []
    )
    generator = HFGenerator.__new__(HFGenerator)
    generator.model, generator.tokenizer, generator.device, generator.batch_size = None, None, "cpu", 2
    generator.max_new_tokens = 32
    generator.generate([], max_new_tokens=5)
    generator.generate([])
    assert seen == [5, 32]


def test_real_generate_stops_at_the_stop_string_while_generating(tmp_path, qwen2_tokenizer):
    """A tiny Qwen2 forced to write "\\n### Instruction" token by token: transformers' generate
    stops when the marker is complete (3 forwards), not after max_new_tokens (40)."""
    from transformers import AutoModelForCausalLM

    from helpers.training import make_tiny_qwen2

    lm = AutoModelForCausalLM.from_pretrained(make_tiny_qwen2(tmp_path, qwen2_tokenizer))
    marker = qwen2_tokenizer("\n### Instruction", add_special_tokens=False)["input_ids"]
    forwards = []
    real_forward = lm.forward

    def forced(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        out.logits[:] = -1e4
        out.logits[:, -1, marker[len(forwards) % len(marker)]] = 1e4
        forwards.append(1)
        return out

    lm.forward = forced
    assert generate_greedy(lm, qwen2_tokenizer, ["hello there"], 40, "cpu") == [""]
    assert len(forwards) == len(marker) == 3
