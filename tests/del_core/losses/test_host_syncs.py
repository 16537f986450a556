"""The loss never synchronises host and device: no ``.item()``/``bool()``, no ``nonzero``, no
host-to-device copies in a forward + backward once its constants are cached on the device.

Counted on CPU with ``helpers.host_syncs`` (the ops that would sync on a GPU), attributed to the
file that asked for them; the device check (tests/gpu) confirms with
``torch.cuda.set_sync_debug_mode`` on a GPU.
"""

import pytest
import torch

from del_core import LOSS_NAMES
from del_core.losses.statistics import VocabSlice
from helpers.host_syncs import count_host_syncs
from helpers.toy_vocab import V, build, make_batch

OURS = "/del_core/"


def _dense_call(loss, logits, labels, num_tokens, num_digits, vocab_slice=None):
    logits = logits.detach().requires_grad_(True)
    out = loss(logits, labels, num_tokens, num_digits, vocab_slice=vocab_slice)
    out.loss.backward()
    return out


def _chunked_call(loss, labels, num_tokens, num_digits):
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(*labels.shape, 8, generator=generator, requires_grad=True)
    weight = torch.randn(V, 8, generator=generator, requires_grad=True)
    out = loss.from_hidden(hidden, weight, labels, num_tokens, num_digits, chunk_size=5)
    out.loss.backward()
    return out


def _syncs_of(call) -> list:
    call()  # warm-up: the first call per device caches the digit ids/columns there
    with count_host_syncs() as log:
        call()
    return log.from_package(OURS)


NORMALISERS = {"none": (None, None), "python": (100, 40), "tensor": (torch.tensor(100.0), torch.tensor(40))}


@pytest.mark.parametrize("normalisers", sorted(NORMALISERS))
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_dense_and_chunked_loss_calls_do_not_sync(name, normalisers):
    logits, labels = make_batch()
    num_tokens, num_digits = NORMALISERS[normalisers]
    loss = build(name)
    dense = _syncs_of(lambda: _dense_call(loss, logits, labels, num_tokens, num_digits))
    assert not dense, "\n".join(e.origin for e in dense)
    if name != "emo":  # EMO's chunked path is covered by the statistics tests; same code
        chunked = _syncs_of(lambda: _chunked_call(loss, labels, num_tokens, num_digits))
        assert not chunked, "\n".join(e.origin for e in chunked)


def test_a_vocab_slice_call_does_not_sync():
    """The tensor-parallel path's digit columns are cached per slice and device too."""
    logits, labels = make_batch()
    vslice = VocabSlice(0, V - 3, V)  # a slice that owns every digit column but not the last ids
    labels = labels.clamp(max=V - 4)
    loss = build("del")
    events = _syncs_of(lambda: _dense_call(loss, logits[..., : V - 3], labels, None, None, vslice))
    assert not events, "\n".join(e.origin for e in events)


def test_the_counter_sees_the_host_checks():
    """The budget test can fail: validate='sync' checks on the host and is counted."""
    logits, labels = make_batch()
    loss = build("del", validate="sync")
    events = _syncs_of(lambda: _dense_call(loss, logits, labels, 100, 40))
    kinds = {e.kind for e in events}
    assert len(events) >= 4 and kinds == {"item"}, [e.origin for e in events]
