"""torch.compile captures every loss as one graph, without breaks, for all padded lengths.

Counting uses the ``aot_eager`` backend (dynamo + AOTAutograd, no code generation: fast, and it
runs the same ATen ops as eager, so values match to float64 round-off); one case checks inductor's
generated code. ``fullgraph=True`` turns any graph break into an error; the sequence dimension is
marked dynamic on the first call, so ONE compiled frame must serve every later length.
"""

import pytest
import torch
import torch._dynamo as dynamo
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters

from del_core import LOSS_NAMES
from helpers.toy_vocab import V, build, encode

pytestmark = pytest.mark.slow

H = 6
NUM_CHUNKS = 3
LENGTHS = (12, 17, 23, 31)  # the first traces; the other three must reuse its graph


def batch(T, B=2, seed=0):
    g = torch.Generator().manual_seed(seed + T)
    text = "a12.5b3x.75_9y_" * 3
    labels = torch.tensor([encode(text[i : i + T]) for i in range(B)])
    hidden = torch.randn(B, T, H, generator=g, dtype=torch.float64)
    weight = 2.0 * torch.randn(V, H, generator=g, dtype=torch.float64)
    return labels, hidden, weight


def loss_call(loss_fn, path):
    """The loss call of ``path`` as a function of (labels, hidden, weight)."""
    if path == "dense":
        return lambda labels, h, w: loss_fn(h @ w.T, labels, 400, 150)
    return lambda labels, h, w: loss_fn.from_hidden(h, w, labels, num_chunks=NUM_CHUNKS)


def run(fn, labels, hidden, weight, *, mark=False):
    """(outputs, hidden grad, weight grad) of one call and its backward."""
    h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    if mark:  # the sequence dimension is dynamic from the first trace on
        dynamo.mark_dynamic(labels, 1)
        dynamo.mark_dynamic(h, 1)
    out = fn(labels, h, w)
    out.loss.backward()
    return [out.loss, out.ce, out.aux, *out.metrics.values(), h.grad, w.grad]


def compile_and_compare(name, path, lengths, backend="aot_eager", rtol=1e-12, atol=1e-14, validate=False):
    """Frames compiled over ``lengths``; asserts no graph break and compiled == eager at each."""
    dynamo.reset()
    counters.clear()
    fn = loss_call(build(name, validate=validate), path)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, backend=counter, fullgraph=True)
    for i, T in enumerate(lengths):
        args = batch(T)
        expected = run(fn, *args)
        got = run(compiled, *args, mark=i == 0)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol)
    assert sum(counters["graph_break"].values()) == 0
    return counter.frame_count


@pytest.mark.parametrize("path", ["dense", "chunked"])
@pytest.mark.parametrize("name", ["mle", "del"])
def test_one_graph_for_every_length(name, path):
    # float64 and the same ATen ops as eager: equal up to a few ulps.
    assert compile_and_compare(name, path, LENGTHS) == 1


@pytest.mark.parametrize("path", ["dense", "chunked"])
def test_the_default_device_side_checks_stay_in_the_graph(path):
    """validate='async' (the default) compiles to the same single graph: its checks are
    torch._assert_async ops, not host reads."""
    assert compile_and_compare("del", path, LENGTHS[:3], validate="async") == 1


@pytest.mark.parametrize("name", sorted(set(LOSS_NAMES) - {"mle", "del"}))
def test_other_losses_compile_to_one_graph(name):
    # Their terms differ only after the shared statistics (checked above on both paths); EMO's
    # chunked path also runs the recomputing backward with the expected-embedding gradient.
    assert compile_and_compare(name, "dense", LENGTHS[:2]) == 1
    if name == "emo":
        assert compile_and_compare(name, "chunked", LENGTHS[:2]) == 1


@pytest.mark.launches  # inductor runs a C++ compiler in a subprocess
@pytest.mark.slow  # ~75 s on 2 cores with a cold inductor cache (C++ compilation), ~10 s warm
def test_inductor_matches_eager():
    # Inductor fuses and reorders the float64 reductions over V and N (at most ~100 terms here):
    # the sums differ from eager by round-off; rtol 1e-9 leaves three orders of margin over 1e-12.
    assert compile_and_compare("del", "chunked", LENGTHS[:1], backend="inductor", rtol=1e-9, atol=1e-12) == 1


def test_without_num_chunks_the_chunked_path_specialises_on_length():
    """Documents why ``num_chunks`` exists: ``range(0, N, chunk_size)`` fixes N in the graph."""
    loss_fn = build("mle", validate=False)
    dynamo.reset()
    labels, hidden, weight = batch(12)
    dynamo.mark_dynamic(hidden, 1)
    dynamo.mark_dynamic(labels, 1)
    fn = torch.compile(lambda h, w, y: loss_fn.from_hidden(h, w, y, chunk_size=8).loss, backend="eager")
    with pytest.raises(Exception, match="specialized"):
        fn(hidden, weight, labels)
