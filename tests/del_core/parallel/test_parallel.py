"""Vocab-parallel losses in 1-4 gloo processes equal the unsharded computation.

Every loss, from sharded logits and from hidden states through a vocab-parallel LM head, with the
digit ids all on the first rank, split across two ranks, and on the last rank; with the real Qwen2
ids on a 151,936-row head; with ignored positions and with a batch without digits. One world is
started per size; each rank saves its results and this process compares them.
"""

import tempfile

import pytest
import torch
import torch.multiprocessing as mp

from del_core import LOSS_NAMES
from del_core.parallel import vocab_range
from helpers.parallel_worker import make_loss, scenario_inputs, worker

V = 47  # uneven over 2, 3 and 4 ranks; the last of 4 ranks still holds 11 rows
H = 6
V_HEAD = 151_936
WORLD_SIZES = (1, 2, 3, 4)


def _encode(texts, digits, point, other):
    table = {str(d): i for d, i in enumerate(digits)} | {".": point, "_": -100}
    return [[table.get(ch, other) for ch in text] for text in texts]


def placements(world):
    boundary = vocab_range(V, 0, world)[1] if world > 1 else V // 2
    return {
        "first": (list(range(10)), 10),
        "split": (list(range(boundary - 5, boundary + 5)), boundary - 6),
        "last": (list(range(V - 10, V)), V - 11),
    }


def scenarios(world):
    texts = ["ab12.5cd", "3x.75_9y", "zz100.1z", "no_digit"]
    out = {}
    for where, (digits, point) in placements(world).items():
        other = next(i for i in range(V) if i not in digits and i != point)
        out[where] = dict(
            seed=len(out),
            V=V,
            hidden=H,
            dtype="float64",
            digits=digits,
            point=point,
            labels=_encode(texts, digits, point, other),
            losses=list(LOSS_NAMES),
        )
    digits, point = list(range(15, 25)), 13  # Qwen2's real ids
    out["qwen2"] = dict(
        seed=9,
        V=V_HEAD,
        hidden=4,
        dtype="float32",
        digits=digits,
        point=point,
        labels=_encode(["x=42.5!", "7_0.25x"], digits, point, 220),
        losses=["del", "emo", "mixce"],
    )
    first_digits, first_point = placements(world)["first"]
    out["no_digits"] = dict(
        seed=11,
        V=V,
        hidden=H,
        dtype="float64",
        digits=first_digits,
        point=first_point,
        labels=_encode(["abcd", "ef_g"], first_digits, first_point, 20),
        losses=["del", "ntl_was", "dist2"],
    )
    return out


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda w: f"world{w}")
def world_results(request):
    world = request.param
    with tempfile.TemporaryDirectory() as tmp:
        scs = scenarios(world)
        mp.start_processes(worker, args=(world, f"{tmp}/init", tmp, scs, V_HEAD), nprocs=world, start_method="spawn")
        ranks = [torch.load(f"{tmp}/rank{r}.pt", weights_only=False) for r in range(world)]
    return world, scs, ranks


def reference(sc, name):
    """Single-process loss and gradients on full logits / hidden states."""
    logits, hidden, weight, labels, embedding = scenario_inputs(sc)
    loss_fn = make_loss(name, sc, embedding)
    logits.requires_grad_(True)
    out = loss_fn(logits, labels)
    out.loss.backward()
    h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    hidden_out = loss_fn(h @ w.T, labels)
    hidden_out.loss.backward()
    return out, logits.grad, hidden_out.loss.item(), h.grad, w.grad


def _tolerance(sc):
    """float64: exact to round-off; float32: the hidden gradient sums 151,936 products per entry
    in a different order (per shard, then across ranks), so allow fp32 round-off of that sum."""
    return dict(rtol=1e-10, atol=1e-12) if sc["dtype"] == "float64" else dict(rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("scenario", ["first", "split", "last", "qwen2", "no_digits"])
def test_vocab_parallel_equals_unsharded(world_results, scenario):
    world, scs, ranks = world_results
    sc = scs[scenario]
    tol = _tolerance(sc)
    for name in sc["losses"]:
        ref, ref_grad, ref_hidden_loss, ref_grad_h, ref_grad_w = reference(sc, name)
        rel = 1e-12 if sc["dtype"] == "float64" else 1e-6
        for rank in ranks:
            got = rank[scenario][(name, "logits")]
            assert got["loss"] == pytest.approx(ref.loss.item(), rel=rel), (name, world)
            assert got["aux"] == pytest.approx(ref.aux.item(), rel=rel, abs=1e-12), (name, world)
            for key, value in ref.metrics.items():
                assert got["metrics"][key] == pytest.approx(value.item(), rel=1e-6, abs=1e-9), (name, key)
            hid = rank[scenario][(name, "hidden")]
            assert hid["loss"] == pytest.approx(ref_hidden_loss, rel=rel), (name, world)
            torch.testing.assert_close(hid["grad_hidden"], ref_grad_h, **tol)
        grad = torch.cat([r[scenario][(name, "logits")]["grad"] for r in ranks], dim=-1)
        torch.testing.assert_close(grad, ref_grad, **tol)
        grad_w = torch.cat([r[scenario][(name, "hidden")]["grad"] for r in ranks], dim=0)
        torch.testing.assert_close(grad_w, ref_grad_w, **tol)


def test_digit_placement_really_spans_ranks(world_results):
    world, scs, ranks = world_results
    if world == 1:
        pytest.skip("one rank owns everything")
    owners = {
        rank
        for rank, r in enumerate(ranks)
        for d in scs["split"]["digits"]
        if r["split"]["range"][0] <= d < r["split"]["range"][1]
    }
    assert len(owners) == 2
    last_owner = {
        rank
        for rank, r in enumerate(ranks)
        for d in scs["last"]["digits"]
        if r["last"]["range"][0] <= d < r["last"]["range"][1]
    }
    assert last_owner == {world - 1}


def test_collective_bytes_per_token_do_not_depend_on_vocab_size(world_results):
    """Per token: one MAX of 1 number, one SUM of 2 + 10 digit logits (+ 2 x 4 for EMO), float64."""
    world, scs, ranks = world_results
    n_tokens = len(scs["first"]["labels"]) * len(scs["first"]["labels"][0])
    n_qwen = len(scs["qwen2"]["labels"]) * len(scs["qwen2"]["labels"][0])
    for r in ranks:
        got = r["first"][("del", "logits")]
        assert got["calls"] == 2
        assert got["bytes"] == n_tokens * (1 + 12) * 8
        assert r["first"][("emo", "logits")]["bytes"] == n_tokens * (1 + 12 + 8) * 8
        # The real head has 3,200x the columns of V = 47: the same numbers per token (float32).
        assert r["qwen2"][("del", "logits")]["bytes"] == n_qwen * (1 + 12) * 4


def test_vocab_parallel_head_roundtrip(world_results):
    world, _, ranks = world_results
    weight = torch.randn(V_HEAD, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    hidden = torch.randn(3, 5, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    full = hidden @ weight.T
    assert [r["head"]["range"] for r in ranks] == [vocab_range(V_HEAD, i, world) for i in range(world)]
    for r in ranks:
        start, end = r["head"]["range"]
        assert r["head"]["full_equal"]
        torch.testing.assert_close(r["head"]["local_logits"], full[:, start:end])


def test_vocab_range_uneven():
    assert [vocab_range(151_936, r, 3) for r in range(3)] == [(0, 50_646), (50_646, 101_291), (101_291, 151_936)]
    assert [vocab_range(10, r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    with pytest.raises(ValueError):
        vocab_range(3, 0, 4)
