"""The training data pipeline on the real Qwen2 tokenizer: masking, EOS, truncation, packing,
errors naming file and row."""

import json

import pytest
import torch

from del_core import DigitVocab, number_spans
from del_core.data import DataError, collate, encode, encode_all, load_rows, pack, shuffled
from del_core.data.prompting import format_prompt
from del_core.data.synthetic import make_problems
from helpers.shared import real_tokenizer


@pytest.fixture(scope="module")
def tok():
    return real_tokenizer("qwen2")


def test_encode_masks_prompt_appends_eos_and_aligns_targets(tok):
    row = {"instruction": "What is 12 times 4?", "input": "", "output": "12 * 4 = 48\nThe answer is 48."}
    ex = encode(row, tok, max_length=512)
    prompt = tok(format_prompt(row["instruction"]), add_special_tokens=False)["input_ids"]
    response = tok(row["output"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert ex.input_ids == prompt + response
    assert len(ex.targets) == len(ex.input_ids)
    # Position t predicts token t + 1; only response tokens (and EOS) are targets.
    for t, target in enumerate(ex.targets):
        expected = ex.input_ids[t + 1] if len(prompt) - 1 <= t < len(ex.input_ids) - 1 else -100
        assert target == expected, t
    assert [t for t in ex.targets if t != -100] == response and ex.truncated == 0


def test_input_field_goes_into_the_prompt(tok):
    row = {"instruction": "Add the numbers.", "input": "3 and 4", "output": "7"}
    ex = encode(row, tok, 512)
    assert tok.decode(ex.input_ids).startswith(format_prompt("Add the numbers.", "3 and 4"))
    assert "### Input:\n3 and 4" in tok.decode(ex.input_ids)


def test_truncation_is_reported_and_never_predicts_past_the_cut(tok):
    rows = make_problems(5, seed=1)
    full, _ = encode_all(rows, tok, 4096)
    cut_at = len(full[0].input_ids) - 3
    examples, report = encode_all(rows, tok, cut_at)
    assert report.examples == 5 and report.truncated_examples >= 1
    assert report.truncated_tokens == sum(max(0, len(e.input_ids) - cut_at) for e in full)
    for short, long in zip(examples, full):
        assert short.input_ids == long.input_ids[: len(short.input_ids)]
        assert short.targets[-1] == -100
    # A cut that removes the whole response drops the example and says so.
    prompt_only, report = encode_all(rows[:1], tok, 5)
    assert prompt_only == [] and report.truncated_examples == 1 and "1 truncated" in report.summary()


def test_packing_keeps_examples_apart(tok):
    vocab = DigitVocab.from_tokenizer(tok)
    examples, _ = encode_all(make_problems(6, seed=2), tok, 512)
    packed = pack(examples, max_length=400)
    assert sum(len(p.lengths) for p in packed) == 6 and all(len(p.input_ids) <= 400 for p in packed)
    flat = [e for p in packed for e in p.lengths]
    assert flat == [len(e.input_ids) for e in examples]
    batch = collate(packed, pad_id=tok.eos_token_id)
    for row, p in enumerate(packed):
        start = 0
        for n, ex in zip(p.lengths, examples[sum(len(q.lengths) for q in packed[:row]) :]):
            assert batch.position_ids[row, start : start + n].tolist() == list(range(n))
            assert batch.targets[row, start + n - 1] == -100  # nothing predicts across examples
            assert batch.targets[row, start : start + n].tolist() == ex.targets
            start += n
    # Number spans of a packed row never run from one example into the next.
    spans = number_spans(batch.targets, vocab)
    span_id = spans.span_start.long().cumsum(-1)
    for row, p in enumerate(packed):
        owner = torch.repeat_interleave(torch.arange(len(p.lengths)), torch.tensor(p.lengths))
        in_num = (spans.is_digit | spans.is_point)[row, : len(owner)]
        for s in span_id[row, : len(owner)][in_num].unique():
            assert owner[(span_id[row, : len(owner)] == s) & in_num].unique().numel() == 1


def test_collate_pads_with_ignored_targets():
    from del_core.data import Example

    batch = collate([Example([5, 6, 7], [6, 7, -100]), Example([8], [-100])], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch.targets.tolist() == [[6, 7, -100], [-100, -100, -100]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_shuffle_is_deterministic():
    items = list(range(50))
    assert shuffled(items, 3) == shuffled(items, 3) != shuffled(items, 4)
    assert sorted(shuffled(items, 3)) == items


def test_load_rows_from_files_and_folders(tmp_path):
    rows = [{"instruction": "a", "output": "1"}, {"instruction": "b", "input": "x", "output": "2"}]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    loaded = load_rows(tmp_path)
    assert len(loaded) == 4 and loaded[1] == {"instruction": "b", "input": "x", "output": "2"}
    assert loaded[0]["input"] == ""


@pytest.mark.parametrize(
    "content, suffix, message",
    [
        (
            '{"instruction": "a", "output": "1"}\n{"instruction": "b"}\n',
            ".jsonl",
            r"b\.jsonl: row 2: field 'output' is missing",
        ),
        ('{"instruction": "a", "output": "1"}\nnot json\n', ".jsonl", r"row 2: not valid JSON"),
        ('[{"instruction": "a", "output": 3}]', ".json", r"row 0: field 'output' must be text, got int"),
        ('[{"instruction": "a", "output": "  "}]', ".json", r"row 0: field 'output' is empty"),
        ('[["a", "b"]]', ".json", r"row 0: expected an object"),
        ('{"rows": []}', ".json", r"must hold a list of rows"),
    ],
)
def test_malformed_rows_name_file_and_row(tmp_path, content, suffix, message):
    path = tmp_path / f"b{suffix}"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_rows(path)


def test_missing_source_and_wrong_suffix(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_rows(tmp_path / "nope.json")
    (tmp_path / "rows.csv").write_text("a,b")
    with pytest.raises(DataError, match=r"\.json or \.jsonl"):
        load_rows(tmp_path / "rows.csv")
