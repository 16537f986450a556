"""The loss's normalisers are counted once: the trainer's batch counts and the Trainer adapter's
window counts are the same function, against a hand count."""

from __future__ import annotations

import torch

from del_core.data.normalisers import target_counts
from del_core.data.tokenized import TokenBatch
from del_core.integrations.counting import window_target_counts
from del_core.spans import IGNORE_INDEX
from helpers.toy_vocab import VOCAB, make_batch


def hand_counts(targets: torch.Tensor) -> list[int]:
    """Non-ignored targets and digit-token targets, by reading each id."""
    digits = set(VOCAB.digit_ids)
    kept = [int(t) for t in targets.flatten() if int(t) != IGNORE_INDEX]
    return [len(kept), sum(t in digits for t in kept)]


def test_the_trainer_and_the_adapter_count_the_same_normalisers():
    _, ids = make_batch()
    targets = ids.clone()
    targets[:, :2] = IGNORE_INDEX  # a prompt
    targets[:, -1] = IGNORE_INDEX  # the last position predicts nothing
    batch = TokenBatch(ids, targets, torch.ones_like(ids), torch.arange(ids.shape[1]).expand_as(ids)).with_spans(VOCAB)
    want = hand_counts(targets)
    assert want[1] > 0
    assert target_counts(targets, VOCAB).tolist() == want
    assert target_counts(targets, spans=batch.spans).tolist() == want
    assert batch.counts().tolist() == [*want, ids.numel()]
    # The adapter's batches hold labels aligned with input_ids; the model shifts them.
    labels = torch.cat([torch.full_like(targets[:, :1], IGNORE_INDEX), targets[:, :-1]], dim=1)
    window = window_target_counts([{"labels": labels}, {"labels": labels}], VOCAB, torch.device("cpu"))
    assert window.tolist() == [2 * want[0], 2 * want[1]]


def test_no_vocabulary_and_no_spans_count_no_digits():
    _, ids = make_batch()
    assert target_counts(ids).tolist() == [hand_counts(ids)[0], 0]
