"""Vocab-parallel losses in 1-4 gloo processes equal the unsharded computation.

Every loss, from sharded logits and from hidden states through a vocab-parallel LM head, with the
digit ids all on the first rank, split across two ranks, and on the last rank; with the real Qwen2
ids on a 151,936-row head; with ignored positions and with a batch without digits. One world is
started per size; each rank saves its results and this process compares them.

Multi-digit vocabularies (docs/number_tokens.md; number tokens of widths 1..K, K = 3 as Llama-3's
or K = 2, at a seeded permutation of the ids, so neither contiguous nor in value order): all
1,110 number tokens and the point on rank 0 (``multi_first``), every width group spread over
every rank (``multi_spread``, ``multi_k2``, and ``multi_head`` on a 128,256-row head in float32),
with labels of mixed widths (digit runs split left to right in groups of K), points and ignored
positions. The forward's SUM all-reduce carries 2 + C numbers per token (C = 1,110 or 110)
whatever V is.
"""

import math
import re
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
V_MULTI_FIRST = 4447  # 4 x 1111 + 3: rank 0 of 4 holds rows [0, 1112), room for 1,110 number tokens + '.'
V_MULTI = 1409  # uneven over 2, 3 and 4 ranks
V_MULTI_K2 = 263
V_LLAMA3 = 128_256
MULTI_TEXTS = ["a1234567.0625b", "x.5_98,7654y", "zz100.125z3", "7.12.345q 42", "v1000000.001", "no digits"]
DIGIT_LOSSES = ["mle", "del", "ntl_was", "ntl_mse", "dist2", "smmd"]
MULTI_SCENARIOS = ("multi_first", "multi_spread", "multi_k2", "multi_head")


def _encode(texts, digits, point, other):
    table = {str(d): i for d, i in enumerate(digits)} | {".": point, "_": -100}
    return [[table.get(ch, other) for ch in text] for text in texts]


def number_vocabulary(width, pool, seed):
    """Number tokens of widths 1..``width`` and the point at a seeded permutation of the ids
    ``pool``: the scenario's ``digits``, ``wide`` (width-2..K groups ordered by value) and
    ``point``, and the ids of ``pool`` left over."""
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed)).tolist()
    ids = [pool[i] for i in order]
    groups, at = [], 0
    for w in range(1, width + 1):
        groups.append(ids[at : at + 10**w])
        at += 10**w
    return dict(digits=groups[0], wide=groups[1:], point=ids[at]), ids[at + 1 :]


def number_groups(sc):
    """The scenario's number-token ids by width: [ids of width 1, ids of width 2, ...]."""
    return [sc["digits"], *sc.get("wide", [])]


def _encode_numbers(texts, vocab, others):
    """Labels of ``texts`` as a tokenizer with number tokens of widths 1..K writes them: digit runs
    left to right in groups of K (Llama-3: 1234567 -> 123 456 7), '.' the point, '_' ignored, any
    other character one of ``others``; rows padded with ignored positions."""
    groups = number_groups(vocab)
    k = len(groups)
    rows = []
    for text in texts:
        row = []
        for run in re.findall(r"[0-9]+|.", text):
            if run.isdigit():
                row += [groups[len(run[i : i + k]) - 1][int(run[i : i + k])] for i in range(0, len(run), k)]
            else:
                row.append({".": vocab["point"], "_": -100}.get(run, others[ord(run) % len(others)]))
        rows.append(row)
    length = max(map(len, rows))
    return [row + [-100] * (length - len(row)) for row in rows]


def multi_digit_scenarios():
    """The multi-digit scenarios (none depends on the world size)."""
    out = {}
    cases = {
        # all number tokens and the point inside rank 0's rows for every world; other tokens everywhere
        "multi_first": (3, V_MULTI_FIRST, list(range(1112)), "float64"),
        # number tokens at random rows of the whole vocabulary: every width group on every rank
        "multi_spread": (3, V_MULTI, list(range(V_MULTI)), "float64"),
        "multi_k2": (2, V_MULTI_K2, list(range(V_MULTI_K2)), "float64"),
        "multi_head": (3, V_LLAMA3, list(range(V_LLAMA3)), "float32"),
    }
    for seed, (name, (width, vocab_size, pool, dtype)) in enumerate(cases.items(), start=21):
        vocab, others = number_vocabulary(width, pool, seed=0)
        others = others + list(range(len(pool), vocab_size, 101))
        texts = MULTI_TEXTS if vocab_size < V_LLAMA3 else MULTI_TEXTS[:3]
        out[name] = dict(
            seed=seed,
            V=vocab_size,
            hidden=H if dtype == "float64" else 4,
            dtype=dtype,
            **vocab,
            labels=_encode_numbers(texts, vocab, others),
            # the big head (its time grows with V) checks the payload and fp32 round-off
            losses=DIGIT_LOSSES if vocab_size < V_LLAMA3 else ["mle", "del", "dist2"],
        )
    return out


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
    out.update(multi_digit_scenarios())
    return out


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda w: f"world{w}")
def world_results(request):
    world = request.param
    with tempfile.TemporaryDirectory() as tmp:
        scs = scenarios(world)
        mp.start_processes(worker, args=(world, f"{tmp}/init", tmp, scs, V_HEAD), nprocs=world, start_method="spawn")
        ranks = [torch.load(f"{tmp}/rank{r}.pt", weights_only=False) for r in range(world)]
    return world, scs, ranks


_REFERENCES: dict = {}


def reference(sc, name):
    """Single-process loss and gradients on full logits / hidden states (made once per scenario
    content and loss: most scenarios are the same in every world)."""
    key = (name, repr(sorted(sc.items())))
    if key not in _REFERENCES:
        _REFERENCES[key] = _reference(sc, name)
    return _REFERENCES[key]


def _reference(sc, name):
    logits, hidden, weight, labels, embedding = scenario_inputs(sc)
    loss_fn = make_loss(name, sc, embedding)
    logits.requires_grad_(True)
    out = loss_fn(logits, labels)
    out.loss.backward()
    h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    hidden_out = loss_fn(h @ w.T, labels)
    hidden_out.loss.backward()
    return out, logits.grad, hidden_out, h.grad, w.grad


def _tolerance(sc):
    """float64: exact to round-off; float32: the hidden gradient sums 151,936 products per entry
    in a different order (per shard, then across ranks), so allow fp32 round-off of that sum."""
    return dict(rtol=1e-10, atol=1e-12) if sc["dtype"] == "float64" else dict(rtol=1e-3, atol=1e-4)


def _assert_same_output(got, ref, rel, what):
    """Loss, aux and metrics of one rank's result equal the single-process ones."""
    assert got["loss"] == pytest.approx(ref.loss.item(), rel=rel), what
    assert got["aux"] == pytest.approx(ref.aux.item(), rel=rel, abs=1e-12), what
    assert got["metrics"].keys() == ref.metrics.keys(), what
    for key, value in ref.metrics.items():
        assert got["metrics"][key] == pytest.approx(value.item(), rel=1e-6, abs=1e-9), (what, key)


def _assert_close(actual, expected, tol, what):
    torch.testing.assert_close(actual, expected, **tol, msg=lambda message: f"{what}: {message}")


@pytest.mark.launches
@pytest.mark.parametrize("scenario", ["first", "split", "last", "qwen2", "no_digits", *MULTI_SCENARIOS])
def test_vocab_parallel_equals_unsharded(world_results, scenario):
    """Every rank's loss, aux, metrics and hidden gradient, and its local logit columns' and
    weight rows' gradients, equal the single-process ones (and the matching slices of them)."""
    world, scs, ranks = world_results
    sc = scs[scenario]
    tol = _tolerance(sc)
    for name in sc["losses"]:
        ref, ref_grad, ref_hidden, ref_grad_h, ref_grad_w = reference(sc, name)
        rel = 1e-12 if sc["dtype"] == "float64" else 1e-6
        for rank_id, rank in enumerate(ranks):
            what = (name, f"world {world}", f"rank {rank_id}")
            start, end = rank[scenario]["range"]
            got = rank[scenario][(name, "logits")]
            _assert_same_output(got, ref, rel, what + ("logits",))
            _assert_close(got["grad"], ref_grad[..., start:end], tol, what + ("logit columns",))
            hid = rank[scenario][(name, "hidden")]
            _assert_same_output(hid, ref_hidden, rel, what + ("hidden",))
            _assert_close(hid["grad_hidden"], ref_grad_h, tol, what + ("hidden",))
            _assert_close(hid["grad"], ref_grad_w[start:end], tol, what + ("weight rows",))
        assert [r[scenario]["range"] for r in ranks] == [vocab_range(sc["V"], i, world) for i in range(world)]


@pytest.mark.launches
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


def _owners(ranks, scenario, ids):
    """The ranks whose vocabulary rows hold any of ``ids``."""
    return {rank for rank, r in enumerate(ranks) for i in ids if r[scenario]["range"][0] <= i < r[scenario]["range"][1]}


@pytest.mark.launches
def test_multi_digit_placement_and_labels(world_results):
    """The multi-digit scenarios are what they claim: shuffled ids, number tokens on rank 0 only or
    every width group on every rank, labels of every width with points and ignored positions."""
    world, scs, ranks = world_results
    first = scs["multi_first"]
    assert _owners(ranks, "multi_first", sum(number_groups(first), []) + [first["point"]]) == {0}
    for scenario in MULTI_SCENARIOS:
        sc = scs[scenario]
        groups = number_groups(sc)
        assert [len(g) for g in groups] == [10**w for w in range(1, len(groups) + 1)]
        for group in groups:
            assert group != sorted(group) and max(group) - min(group) >= len(group), (scenario, "ids shuffled")
        if scenario != "multi_first":
            for group in groups:  # each width group straddles every shard boundary
                assert _owners(ranks, scenario, group) == set(range(world)), scenario
        labels = [t for row in sc["labels"] for t in row]
        widths = {w for t in labels for w, group in enumerate(groups, start=1) if t in group}
        assert widths == set(range(1, len(groups) + 1)), scenario
        assert sc["point"] in labels and -100 in labels, scenario
        # the ordinary tokens' rows are on several ranks
        assert len(_owners(ranks, scenario, set(labels) - set(sum(groups, [])) - {-100})) == world


@pytest.mark.launches
def test_multi_digit_payload_is_2_plus_c_per_token(world_results):
    """Per token, on both paths: one MAX of 1 number and one SUM of 2 + C numbers (C = 1,110 for
    K = 3, 110 for K = 2), whatever V is (4,447, 1,409 or 128,256 rows); from hidden states one
    MAX and one SUM per chunk of 5 tokens."""
    world, scs, ranks = world_results
    for scenario in MULTI_SCENARIOS:
        sc = scs[scenario]
        n_numbers = len(sum(number_groups(sc), []))
        n_tokens = len(sc["labels"]) * len(sc["labels"][0])
        payload = n_tokens * (1 + 2 + n_numbers) * (8 if sc["dtype"] == "float64" else 4)
        for r in ranks:
            for name in sc["losses"]:  # mle too: it gathers the number logits for its digit metrics
                got, hid = r[scenario][(name, "logits")], r[scenario][(name, "hidden")]
                assert (got["calls"], got["bytes"]) == (2, payload), (scenario, name, world)
                assert (hid["calls"], hid["bytes"]) == (2 * math.ceil(n_tokens / 5), payload), (scenario, name, world)


@pytest.mark.launches
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


@pytest.mark.launches
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
