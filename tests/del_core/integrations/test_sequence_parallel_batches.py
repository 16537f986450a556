"""The Trainer adapter's batches under DeepSpeed Ulysses sequence parallelism (fast, no process):
the collator wrapper pads to a multiple of sp, adds position ids and the whole-sequence number
spans as columns; cut as DeepSpeed's dataloader adapter cuts them, the columns are the spans of the
whole sequence, not those each shard would compute; the settings the adapter refuses."""

from __future__ import annotations

import pytest
import torch

from del_core import DigitVocab, number_spans
from del_core.integrations import aligned_targets, carried_spans, target_counts
from del_core.integrations.sequence_parallel import WholeSequenceSpans, with_whole_sequence_spans
from del_core.integrations.setup_checks import parallelism_problems, sequence_parallel_problems
from del_core.spans import IGNORE_INDEX

# token ids 3..12 are the digits 0..9, 1 is the decimal point
VOCAB = DigitVocab(tuple(range(3, 13)), 1)


def batch() -> dict[str, torch.Tensor]:
    """Two rows of 7 positions: "12.5" and "907" as label tokens, the second row padded."""
    labels = torch.tensor(
        [[IGNORE_INDEX, 20, 4, 5, 1, 8, 21], [IGNORE_INDEX, 12, 3, 10, 30, IGNORE_INDEX, IGNORE_INDEX]]
    )
    return {
        "input_ids": torch.where(labels == IGNORE_INDEX, 0, labels),
        "labels": labels,
        "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2]),
    }


def deepspeed_cut(batch: dict, rank: int, parts: int) -> dict:
    """What UlyssesSPDataLoaderAdapter hands rank ``rank``: labels -> shift_labels, dim 1 cut."""
    batch = dict(batch)
    labels = torch.nn.functional.pad(batch.pop("labels"), (0, 1), value=IGNORE_INDEX)
    batch["shift_labels"] = labels[:, 1:]
    size = batch["input_ids"].shape[1] // parts
    return {k: v[:, rank * size : (rank + 1) * size] for k, v in batch.items()}


@pytest.mark.parametrize("parts", [2, 4])
def test_padded_batch_carries_the_whole_sequence_spans(parts):
    whole = batch()
    out = with_whole_sequence_spans(whole, VOCAB, parts, pad_id=0)
    padded = -(-7 // parts) * parts
    assert out["input_ids"].shape == out["labels"].shape == out["attention_mask"].shape == (2, padded)
    assert (out["labels"][:, 7:] == IGNORE_INDEX).all() and (out["attention_mask"][:, 7:] == 0).all()
    assert torch.equal(out["position_ids"], torch.arange(padded).repeat(2, 1))
    expected = number_spans(aligned_targets(whole), VOCAB)
    spans = carried_spans(out)
    for got, want in zip(spans, expected):
        torch.testing.assert_close(got[:, :7], want)
    shards = [deepspeed_cut(out, r, parts) for r in range(parts)]
    # the cut columns are the whole-sequence spans, aligned with the shard's shift_labels
    for r, shard in enumerate(shards):
        cut = carried_spans(shard)
        size = padded // parts
        assert torch.equal(cut.place_value, spans.place_value[:, r * size : (r + 1) * size])
        assert torch.equal(shard["shift_labels"], aligned_targets(out)[:, r * size : (r + 1) * size])
    # counts over the shards add up to the whole batch's; spans recomputed per shard do not
    total = sum(target_counts(aligned_targets(s), VOCAB, carried_spans(s)) for s in shards)
    assert torch.equal(total, target_counts(aligned_targets(whole), VOCAB))
    per_shard = [number_spans(aligned_targets(s), VOCAB).place_value for s in shards]
    assert not torch.equal(torch.cat(per_shard, dim=1), spans.place_value)  # "12.5" is cut


def test_fixed_length_and_without_vocabulary():
    out = WholeSequenceSpans(lambda rows: batch(), None, 2, 0, length=12)(["row"])
    assert out["input_ids"].shape == (2, 12) and carried_spans(out) is None
    with pytest.raises(ValueError, match="longer than the fixed sequence length 6"):
        with_whole_sequence_spans(batch(), VOCAB, 2, 0, length=6)


def test_sequence_parallelism_is_accepted_tensor_and_context_parallelism_are_not():
    assert parallelism_problems(1, 1, 1, 4) == []
    assert "tensor parallelism of size 2" in parallelism_problems(1, 2, 1, 1)[0]
    assert "context parallelism of size 2" in parallelism_problems(1, 1, 2, 1)[0]
    assert sequence_parallel_problems(2, False, True) == sequence_parallel_problems(1, True, False) == []
    assert "loss_weight='auto' with sequence parallelism (sp_size=2)" in sequence_parallel_problems(2, True, True)[0]
    assert "(sp_size=4) without DeepSpeed" in sequence_parallel_problems(4, False, False)[0]
