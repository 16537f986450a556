"""Padding-free micro-batches (``data.padding_free``): a batch's examples joined into one row
[1, sum of lengths] with position ids restarting per example give the padded batch's targets,
spans, counts, loss and gradients; the variants that would not (positions running on, a boundary
that predicts the next example) differ, and what cannot be exact is refused by key."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from del_core.config import ConfigError
from del_core.data.tokenized import Example, TokenBatch, collate, join
from del_core.losses import LOSS_NAMES, loss_needs
from del_core.spans import IGNORE_INDEX
from del_core.training.config import load_train_config
from del_core.training.model_setup import JOINED_EXAMPLE_MODEL_TYPES, check_joins_examples
from del_core.training.objective import CausalLMObjective
from helpers.tiny_models import tiny_causal_lm
from helpers.toy_vocab import DIGITS, POINT, VOCAB, build

V = 64  # the toy vocabulary: DIGITS and POINT of helpers.toy_vocab, other characters at 54..59
EOS = 63
PAD = 62


def toy_ids(text: str) -> list[int]:
    return [DIGITS[int(c)] if c.isdigit() else POINT if c == "." else 54 + ord(c) % 6 for c in text]


def example(prompt: str, response: str, max_length: int = 64) -> Example:
    """``prompt + response + EOS`` with the response and EOS targeted (position t predicts t + 1),
    cut to ``max_length`` tokens as encoding cuts (the last kept position then predicts nothing)."""
    ids = toy_ids(prompt) + toy_ids(response) + [EOS]
    first = len(toy_ids(prompt))
    targets = [ids[t + 1] if t + 1 >= first else IGNORE_INDEX for t in range(len(ids) - 1)] + [IGNORE_INDEX]
    cut = max(0, len(ids) - max_length)
    if cut:
        ids, targets = ids[:max_length], targets[: max_length - 1] + [IGNORE_INDEX]
    return Example(ids, targets, cut)


# Different lengths; numbers with points; the second is cut inside a number and the third starts
# with a digit, so a boundary that predicted the next token would extend that number.
EXAMPLES = [
    example("add 12 and 3", "12+3=15"),
    example("price", "3.75 then 1208.5", max_length=17),  # cut after "then 12"
    example("7 cats", "7.2"),
    example("what is 40", "40 is 40.0 exactly, 981"),
]


def padded_and_flat(examples=EXAMPLES) -> tuple[TokenBatch, TokenBatch]:
    return (
        collate(examples, PAD).with_spans(VOCAB),
        collate(examples, PAD, padding_free=True).with_spans(VOCAB),
    )


def real_positions(batch: TokenBatch) -> torch.Tensor:
    return batch.attention_mask.bool()


def test_flattened_batch_holds_the_examples_in_order_without_padding():
    padded, flat = padded_and_flat()
    lengths = [len(e.input_ids) for e in EXAMPLES]
    assert flat.input_ids.shape == (1, sum(lengths))
    assert flat.input_ids[0].tolist() == [i for e in EXAMPLES for i in e.input_ids]
    assert flat.position_ids[0].tolist() == [p for n in lengths for p in range(n)]
    assert bool(flat.attention_mask.all())
    mask = real_positions(padded)
    assert torch.equal(flat.targets[0], padded.targets[mask])
    assert torch.equal(flat.input_ids[0], padded.input_ids[mask])
    for padded_field, flat_field in zip(padded.spans, flat.spans):
        assert torch.equal(flat_field[0], padded_field[mask])
    assert not (padded.spans.is_digit | padded.spans.is_point)[~mask].any()  # no number on the padding
    assert torch.equal(flat.counts(), padded.counts())  # target tokens, digit targets, attended tokens
    ends = torch.tensor(lengths).cumsum(0) - 1
    assert (flat.targets[0, ends] == IGNORE_INDEX).all()
    assert int(flat.spans.is_digit.sum()) > 10 and int(flat.counts()[1]) == int(flat.spans.is_digit.sum())


def test_only_examples_that_predict_nothing_at_their_end_are_joined():
    bad = Example([1, 2, 3], [2, 3, 4])
    with pytest.raises(ValueError, match="example 1: its last position predicts token 4"):
        collate([EXAMPLES[0], bad], PAD, padding_free=True)
    packed = join(EXAMPLES[:2])
    with pytest.raises(ValueError, match="item 0 is a Packed"):
        collate([packed], PAD, padding_free=True)


def objective_output(model, loss_fn, batch: TokenBatch, counts: torch.Tensor, mask: bool, **overrides):
    """The objective's named scalars on ``batch`` (with ``mask``: its attention mask, else None, as
    the trainer runs joined examples) and the gradient of every parameter of ``model``."""
    model.zero_grad(set_to_none=True)
    inputs = dict(
        input_ids=batch.input_ids,
        targets=batch.targets,
        attention_mask=batch.attention_mask if mask else None,
        position_ids=batch.position_ids,
        num_tokens=counts[0],
        num_digits=counts[1],
        spans=batch.spans,
    )
    out = CausalLMObjective(model, loss_fn)(**{**inputs, **overrides})
    out["loss"].backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters()}


def gaps(a, b) -> tuple[float, float]:
    """(|loss a - loss b| relative, max over parameters of |grad a - grad b| / max |grad b|)."""
    (out_a, grads_a), (out_b, grads_b) = a, b
    loss_a, loss_b = out_a["loss"].detach(), out_b["loss"].detach()
    loss_gap = float((loss_a - loss_b).abs() / loss_b.abs())
    grad_gap = max(float((grads_a[k] - grads_b[k]).abs().max() / grads_b[k].abs().max()) for k in grads_b)
    return loss_gap, grad_gap


EXACT_LOSSES = [name for name in LOSS_NAMES if not loss_needs(name).per_sequence]


@pytest.mark.parametrize("loss", EXACT_LOSSES)
def test_padding_free_gives_the_padded_loss_and_gradients(loss):
    """fp32 tiny Qwen2, every loss without per-sequence terms: measured gaps (relative; gradients
    relative to each parameter's largest) at most 1.2e-7 in the loss and 6.1e-7 in the gradients."""
    model = tiny_causal_lm("qwen2", V, seed=0)
    loss_fn = build(loss)
    padded, flat = padded_and_flat()
    counts = padded.counts()
    reference = objective_output(model, loss_fn, padded, counts, mask=True)
    joined = objective_output(model, loss_fn, flat, counts, mask=False)
    for key in ("ce", "aux", "n_tokens", "n_digits"):
        torch.testing.assert_close(joined[0][key], reference[0][key], rtol=1e-5, atol=1e-7)
    loss_gap, grad_gap = gaps(joined, reference)
    assert loss_gap < 1e-6 and grad_gap < 1e-5, (loss_gap, grad_gap)


@pytest.mark.parametrize("architecture", JOINED_EXAMPLE_MODEL_TYPES)
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_verified_model_types_keep_joined_examples_apart(architecture, attention):
    """DEL's loss and gradients with joined examples equal the padded batch's for every model type
    data.padding_free accepts, under SDPA and eager attention."""
    model = tiny_causal_lm(architecture, V, seed=0, attn_implementation=attention)
    padded, flat = padded_and_flat()
    counts = padded.counts()
    loss_gap, grad_gap = gaps(
        objective_output(model, build("del"), flat, counts, mask=False),
        objective_output(model, build("del"), padded, counts, mask=True),
    )
    assert loss_gap < 1e-6 and grad_gap < 1e-5, (loss_gap, grad_gap)


def test_positions_that_run_on_let_attention_leak_across_examples():
    """The broken variant: the joined row with position ids 0..N-1 (one long example) is plain
    causal attention over all examples, and its loss differs."""
    model = tiny_causal_lm("qwen2", V, seed=0)
    padded, flat = padded_and_flat()
    counts = padded.counts()
    running_on = torch.arange(flat.input_ids.shape[1]).unsqueeze(0)
    leaky = objective_output(model, build("del"), flat, counts, mask=False, position_ids=running_on)
    exact = objective_output(model, build("del"), padded, counts, mask=True)
    loss_gap, grad_gap = gaps(leaky, exact)
    assert loss_gap > 1e-3 and grad_gap > 1e-2, (loss_gap, grad_gap)


def test_a_boundary_that_predicts_the_next_example_joins_two_numbers():
    """The broken variant: each example's last position predicting the next example's first token
    (a plain shift over the joined row) makes the cut number "12" of example 2 run into the "7" that
    opens example 3: one span across two examples, the number 127, another DEL loss."""
    padded, flat = padded_and_flat()
    lengths = [len(e.input_ids) for e in EXAMPLES]
    starts = torch.tensor([0] + lengths[:-1]).cumsum(0)
    ends = starts + torch.tensor(lengths) - 1
    targets = flat.targets.clone()
    targets[0, ends[:-1]] = flat.input_ids[0, starts[1:]]
    shifted = dataclasses.replace(flat, targets=targets).with_spans(VOCAB)
    boundary = int(ends[1])  # example 2's last position, after the targets "1", "2" of its cut number
    assert not flat.spans.is_digit[0, boundary]
    assert shifted.spans.is_digit[0, boundary] and not shifted.spans.span_start[0, boundary]  # "12" + "7"
    assert flat.spans.place_index[0, boundary - 2] == 2 and shifted.spans.place_index[0, boundary - 2] == 3

    model = tiny_causal_lm("qwen2", V, seed=0)
    counts = padded.counts()
    broken = objective_output(model, build("del"), shifted, shifted.counts(), mask=False)
    exact = objective_output(model, build("del"), padded, counts, mask=True)
    assert gaps(broken, exact)[0] > 1e-3


def test_ntil_averages_per_sequence_so_padding_free_is_refused_for_it():
    """NTIL's number terms are means per sequence: one joined row is one sequence, so the loss
    differs from the padded batch's (noise off) - the reason the configuration refuses it."""
    assert loss_needs("ntil").per_sequence
    model = tiny_causal_lm("qwen2", V, seed=0)
    padded, flat = padded_and_flat()
    counts = padded.counts()
    joined = objective_output(model, build("ntil"), flat, counts, mask=False)
    reference = objective_output(model, build("ntil"), padded, counts, mask=True)
    # The term is rescaled to lambda x CE in value; its gradient carries the per-sequence means.
    assert gaps(joined, reference)[1] > 1e-2
    with pytest.raises(ConfigError, match="data.padding_free=true with loss=ntil"):
        load_train_config(None, ["data.padding_free=true", "loss=ntil"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.packing=true"], "data.padding_free=true with data.packing=true"),
        (["parallel.sp=2"], "data.padding_free=true with parallel.sp=2 is not supported"),
    ],
)
def test_combinations_that_are_not_exact_or_not_verified_are_refused_by_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config(None, ["data.padding_free=true", *overrides])


def test_the_default_is_padded_and_padding_free_loads():
    assert load_train_config(None, []).data.padding_free is False
    config = load_train_config(None, ["data.padding_free=true", "loss=del"])
    assert config.data.padding_free and config.data.joins_examples


def test_an_unverified_model_type_is_refused_before_the_model_loads(tmp_path):
    import transformers

    transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="model type 'gpt2' .* not verified"):
        check_joins_examples(str(tmp_path))
    transformers.Qwen2Config(hidden_size=8, num_attention_heads=2).save_pretrained(tmp_path)
    check_joins_examples(str(tmp_path))


def test_packed_rows_under_flash_attention_need_one_row_micro_batches():
    """transformers' flash-attention path finds packed examples from the position ids only in a
    one-row batch (the premise, read from transformers itself); so packing with flash-attention is
    refused by key for micro-batches of more rows, and allowed for one row, SDPA and eager."""
    from transformers.modeling_flash_attention_utils import _is_packed_sequence

    from del_core.config import ConfigError
    from del_core.training.model_setup import check_packed_attention

    restarting = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])
    assert _is_packed_sequence(restarting, batch_size=1)
    assert not _is_packed_sequence(restarting.repeat(2, 1), batch_size=2)
    with pytest.raises(
        ConfigError, match=r"data.packing=true with attention flash_attention_2 and run.micro_batch_size=2"
    ):
        check_packed_attention("flash_attention_2", True, 2)
    for attn, packing, rows in (
        ("flash_attention_2", True, 1),
        ("sdpa", True, 4),
        ("eager", True, 2),
        ("flash_attention_2", False, 4),
    ):
        check_packed_attention(attn, packing, rows)
