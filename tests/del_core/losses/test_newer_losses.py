"""ntloss's NumberLevelLoss, SMMD and NTIL: hand-computed values, the package's values, gradients,
vocab-sharded logits (shards run in threads with a summing reducer) and multi-digit vocabularies."""

import math
import threading

import pytest
import torch

from del_core import DigitVocab, build_loss
from del_core.losses.ntil import NTILWeights, ntil_sequence_terms, straight_through_digits, whole_number_errors
from del_core.losses.number_runs import number_runs, shard_runs
from del_core.losses.smmd import smmd_kernel, smmd_term, squashed_distances
from del_core.losses.statistics import VocabSlice
from del_core.parallel.comm import vocab_range
from helpers.toy_vocab import DIGITS, POINT, V, build, encode, make_batch

NEWER = ("number_level", "smmd", "ntil")
# Rows 2 and 3 meet digit to digit: a run never continues into the next sequence.
RUN_TEXTS = ["ab12.5cd", "7.25.1x9", "1..2_45z", "3x.75_9y", "no_digit"]


# --- runs ---------------------------------------------------------------------------------------
def _runs(text, join_points=False):
    labels = torch.tensor([encode(text)])
    digit = torch.tensor([[DIGITS.index(i) if i in DIGITS else -1 for i in labels[0].tolist()]])
    return number_runs(digit >= 0, digit, labels == POINT, join_points)


def test_runs_end_at_the_point_and_join_a_single_point_between_digits():
    runs = _runs("a12.34.5..6_78")
    assert runs.digits_after.tolist() == [0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    assert runs.is_run_start.nonzero().flatten().tolist() == [1, 4, 7, 10, 12]
    joined = _runs("a12.34.5..6_78", join_points=True)  # 12.34.5 is one number 12345
    assert joined.digits_after.tolist() == [0, 4, 3, 0, 2, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    assert joined.is_run_start.nonzero().flatten().tolist() == [1, 10, 12]
    assert joined.run_start.tolist()[1:8] == [1, 1, 1, 1, 1, 1, 1]


# --- NumberLevelLoss against ntloss ---------------------------------------------------------------
class _ToyTokenizer:
    """The toy vocabulary as the few tokenizer calls ntloss makes."""

    def __init__(self):
        self.vocab = {f"t{i}": i for i in range(V)}
        for digit, tid in enumerate(DIGITS):
            self.vocab.pop(f"t{tid}")
            self.vocab[str(digit)] = tid
        self.vocab.pop(f"t{POINT}")
        self.vocab["."] = POINT

    def __len__(self):
        return V

    def add_tokens(self, tokens):
        assert all(t in self.vocab for t in tokens)
        return 0

    def get_vocab(self):
        return dict(self.vocab)

    def convert_tokens_to_ids(self, token):
        return self.vocab[token]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reweigh", [False, True])
@pytest.mark.parametrize("float_level", [False, True])
def test_number_level_equals_ntloss(float_level, reweigh, dtype):
    ntloss = pytest.importorskip("ntloss")
    logits, labels = make_batch(seed=4, texts=RUN_TEXTS, dtype=dtype)
    theirs_logits = logits.clone().requires_grad_(True)
    package = ntloss.NumberLevelLoss(_ToyTokenizer(), vocab_size=V, float_level=float_level, reweigh=reweigh)
    theirs = package(theirs_logits, labels, reduction="sum")
    theirs.backward()
    ours_logits = logits.clone().requires_grad_(True)
    out = build("number_level", weight=1.0, float_level=float_level, reweigh=reweigh)(ours_logits, labels)
    # The project divides the sum over numbers by the digit count: undo it, and remove CE's gradient.
    n_digits = out.metrics["n_digits"]
    (out.aux * n_digits).backward()
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    assert (out.aux * n_digits).item() == pytest.approx(theirs.item(), rel=tol)
    torch.testing.assert_close(ours_logits.grad, theirs_logits.grad, rtol=tol * 10, atol=tol * 0.1)


def test_number_level_hand_computed():
    """'37' with uniform digit logits: X = 4.5 * 10 + 4.5 = 49.5, Y = 37."""
    vocab = DigitVocab(tuple(range(10)), 10)
    logits = torch.zeros(1, 3, 11, dtype=torch.float64)
    labels = torch.tensor([[3, 7, 10]])
    out = build_loss("number_level", vocab, weight=1.0)(logits, labels)
    assert out.aux.item() == pytest.approx((49.5 - 37) / (49.5 + 37 + 2.0**-23) / 2, rel=1e-12)
    # reweigh: the full softmax puts 10/11 of its mass on the digits.
    out = build_loss("number_level", vocab, weight=1.0, reweigh=True)(logits, labels)
    mass = 10 / 11
    expected = ((49.5 - 37) / (86.5 + 2.0**-23) * mass + 1.01 * (1 - mass)) / 2
    assert out.aux.item() == pytest.approx(expected, rel=1e-12)


# --- SMMD ----------------------------------------------------------------------------------------
def test_squash_and_kernel_hand_computed():
    values = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    d = squashed_distances(values, 9.0)  # m = 1, M = 3: d' = 1 + (d - 1) * 8 / 2
    assert d[0].tolist() == pytest.approx([0, 1, 5, 9], rel=1e-9)
    assert squashed_distances(values, 1.0)[0].tolist() == [0, 1, 2, 3]
    assert squashed_distances(values[:1], 9.0).tolist() == [[0.0]]
    kernel = smmd_kernel(values, "gaussian", (2.0,), 9.0, "auto")
    row = [math.exp(-(x**2) / 8) for x in d[0].tolist()]
    assert kernel.matrix[0].tolist() == pytest.approx(row, rel=1e-9)
    assert kernel.alpha == pytest.approx(0.5 / float(kernel.matrix.sum(-1).mean()), rel=1e-12)
    laplace = smmd_kernel(values, "laplace", (1.0, 3.0), 1.0, 0.7)
    assert laplace.matrix[0, 2].item() == pytest.approx((math.exp(-2) + math.exp(-2 / 3)) / 2, rel=1e-12)
    assert laplace.alpha == 0.7


def _smmd_reference(z, t, kernel, alpha):
    p = [math.exp(x) / sum(math.exp(y) for y in z) for x in z]
    r = [pi - (1.0 if i == t else 0.0) for i, pi in enumerate(p)]
    k = kernel.matrix.tolist()
    deg = kernel.degree.tolist()
    mmd = sum(r[i] * k[i][j] * r[j] for i in range(len(z)) for j in range(len(z)))
    smooth = sum(deg[i] * r[i] ** 2 for i in range(len(z))) - mmd
    return mmd, smooth


@pytest.mark.parametrize("mode", ["smmd", "mmd", "smooth"])
def test_smmd_term_hand_computed(mode):
    kernel = smmd_kernel(torch.arange(10, dtype=torch.float64), "gaussian", (2.0,), 9.0, "auto")
    z = [0.3, -1.0, 2.0, 0.0, 0.5, 1.5, -0.2, 0.1, 0.9, -2.0]
    logits = torch.tensor([z], dtype=torch.float64)
    term = smmd_term(logits, torch.tensor([5]), kernel.matrix, kernel.degree, kernel.alpha, mode)
    mmd, smooth = _smmd_reference(z, 5, kernel, kernel.alpha)
    expected = {"smmd": mmd + kernel.alpha * smooth, "mmd": mmd, "smooth": kernel.alpha * smooth}[mode]
    assert term.item() == pytest.approx(max(expected, 0.0), rel=1e-10)


def test_smmd_relu_clips_a_negative_combination():
    kernel = smmd_kernel(torch.arange(10, dtype=torch.float64), "gaussian", (2.0,), 9.0, "auto")
    logits = torch.zeros(1, 10, dtype=torch.float64)
    negative = smmd_term(logits, torch.tensor([0]), kernel.matrix, kernel.degree, -50.0, "smmd")
    assert negative.item() == 0.0
    assert smmd_term(logits, torch.tensor([0]), kernel.matrix, kernel.degree, -50.0, "mmd").item() > 0


def test_smmd_loss_is_the_mean_over_numeric_labels():
    logits, labels = make_batch(seed=6)
    out = build("smmd", weight=1.0)(logits, labels)
    kernel = smmd_kernel(torch.arange(10, dtype=torch.float64), "gaussian", (2.0,), 9.0, "auto")
    terms = []
    for b, row in enumerate(labels.tolist()):
        for t, label in enumerate(row):
            if label in DIGITS:
                z = logits[b, t, list(DIGITS)].tolist()
                mmd, smooth = _smmd_reference(z, DIGITS.index(label), kernel, kernel.alpha)
                terms.append(max(mmd + kernel.alpha * smooth, 0.0))
    assert out.aux.item() == pytest.approx(sum(terms) / len(terms), rel=1e-10)


def test_smmd_on_a_multi_digit_vocabulary_scores_the_integers_0_to_999():
    wide = (tuple(range(100, 200)), tuple(range(200, 1200)))
    vocab = DigitVocab(tuple(range(10)), 10, wide_ids=wide)
    loss = build_loss("smmd", vocab, weight=1.0)
    assert loss.numeric_columns.numel() == 1000 and loss.kernel_matrix.shape == (1000, 1000)
    # '62' (id 162), '062' (id 262, zero-padded: outside V_num), '620' (id 820), '7' (id 7)
    labels = torch.tensor([[162, 262, 820, 7]])
    logits = torch.randn(1, 4, 1200, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = loss(logits, labels)
    columns = list(range(10)) + list(range(110, 200)) + list(range(300, 1200))  # ids of 0..999 in order
    kernel = smmd_kernel(torch.arange(1000, dtype=torch.float64), "gaussian", (2.0,), 9.0, "auto")
    z = logits[0][:, columns]
    term = smmd_term(z[[0, 2, 3]], torch.tensor([62, 620, 7]), kernel.matrix, kernel.degree, kernel.alpha)
    assert out.metrics["n_digits"] == 4
    assert out.aux.item() == pytest.approx(term.sum().item() / 4, rel=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("name, options", [("smmd", {}), ("smmd", {"kernel": "laplace"}), ("number_level", {})])
def test_gradcheck(name, options):
    logits, labels = make_batch(seed=8, texts=["a12.5b", "3x.75z"], scale=1.0)
    logits.requires_grad_(True)
    loss = build(name, **options)
    assert torch.autograd.gradcheck(lambda z: loss(z, labels).loss, (logits,), eps=1e-6, atol=1e-7)


# --- NTIL ----------------------------------------------------------------------------------------
def test_straight_through_forward_is_the_argmax_and_gradient_the_soft_one():
    z = torch.tensor([[0.1, 0.5, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.9]], dtype=torch.float64, requires_grad=True)
    value = straight_through_digits(z, None, 0.1)
    assert value.item() == 2.0
    value.backward()
    soft = torch.softmax(z.detach() / 0.1, -1)
    classes = torch.arange(10, dtype=torch.float64)
    expected = soft * (classes - (soft * classes).sum()) / 0.1
    torch.testing.assert_close(z.grad[0], expected[0], rtol=1e-12, atol=1e-15)
    noise = torch.zeros_like(z)
    noise[0, 9] = 0.2  # the noise moves the argmax
    assert straight_through_digits(z.detach(), noise, 0.1).item() == 9.0


def test_whole_number_errors_hand_computed():
    rel, mag = whole_number_errors(torch.tensor([12.0, 40.0, 7.0]), torch.tensor([10.0, 40.0, 99.0]))
    assert rel.tolist() == pytest.approx([2 / 13, 0.0, 92 / 100], rel=1e-6)
    assert mag.tolist() == pytest.approx([math.log(13 / 11), 0.0, math.log(100 / 8)], rel=1e-6)


def _ntil_reference(logits, labels, weights=None):
    """Per sequence: mean of 1.2^k EMD over digits + mean of 0.2 abs + 0.2 mag over runs; argmax."""
    weights = weights or NTILWeights()
    per_sequence = []
    for b, row in enumerate(labels.tolist()):
        runs, run = [], []
        for t, label in enumerate(row + [-1]):
            if label in DIGITS:
                run.append(t)
            elif run:
                runs.append(run)
                run = []
        emd, whole = [], []
        for run in runs:
            x = y = 0
            for i, t in enumerate(run):
                k = len(run) - 1 - i
                z = logits[b, t, list(DIGITS)].tolist()
                q = [math.exp(v) / sum(math.exp(u) for u in z) for v in z]
                d = DIGITS.index(row[t])
                emd.append(weights.digit_exp**k * sum(abs(c - d) * q[c] for c in range(10)))
                x += max(range(10), key=lambda c: z[c]) * 10**k
                y += d * 10**k
            rel = 0.0 if x == y else abs(x - y) / (max(x, y) + 1)
            whole.append(weights.abs_alpha * rel + weights.mag_alpha * math.log((max(x, y) + 1) / (min(x, y) + 1)))
        total = weights.digit_alpha * sum(emd) / len(emd) + sum(whole) / len(whole) if runs else 0.0
        per_sequence.append(total)
    return sum(per_sequence) / len(per_sequence)


def test_ntil_term_and_the_ce_rescaling_hand_computed():
    logits, labels = make_batch(seed=9, texts=RUN_TEXTS)
    term = _ntil_reference(logits, labels)
    loss = build("ntil", noise_scale=0.0)
    out = loss(logits, labels)
    # The released total: CE + 0.3 (CE / (term + 1e-10)).detach() term: the value is CE (1 + 0.3 term / (term + eps)).
    assert out.aux.item() == pytest.approx(0.3 * out.ce.item() * term / (term + 1e-10), rel=1e-12)
    batch = loss._prepare(labels, V, torch.float64)
    runs = shard_runs(batch.spans, batch.rows, False, None)
    digit_logits = torch.where(runs.runs.is_digit.unsqueeze(-1), logits.reshape(-1, V)[:, list(DIGITS)], 0.0)
    shares = ntil_sequence_terms(digit_logits, runs, NTILWeights(), None, 0.1)
    assert shares.sum().item() / labels.shape[0] == pytest.approx(term, rel=1e-12)


def test_ntil_gradient_is_ce_plus_the_rescaled_term_gradient():
    logits, labels = make_batch(seed=10, texts=RUN_TEXTS)
    z = logits.clone().requires_grad_(True)
    build("ntil", noise_scale=0.0)(z, labels).loss.backward()
    # reference: CE + 0.3 * c * term with c = CE / term frozen
    ref = logits.clone().requires_grad_(True)
    plain = build("mle")(ref, labels).loss
    scale = 0.3 * plain.item() / (_ntil_reference(logits, labels) + 1e-10)
    loss = build("ntil", noise_scale=0.0)
    batch = loss._prepare(labels, V, torch.float64)
    runs = shard_runs(batch.spans, batch.rows, False, None)
    digit_logits = torch.where(runs.runs.is_digit.unsqueeze(-1), ref.reshape(-1, V)[:, list(DIGITS)], 0.0)
    term = ntil_sequence_terms(digit_logits, runs, NTILWeights(), None, 0.1).sum() / labels.shape[0]
    (plain + scale * term).backward()
    torch.testing.assert_close(z.grad, ref.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.slow
def test_ntil_emd_term_gradcheck():
    logits, labels = make_batch(seed=11, texts=RUN_TEXTS, scale=1.0)
    loss = build("ntil")
    batch = loss._prepare(labels, V, torch.float64)
    runs = shard_runs(batch.spans, batch.rows, False, None)
    emd_only = NTILWeights(abs_alpha=0.0, mag_alpha=0.0)
    digit_logits = logits.reshape(-1, V)[:, list(DIGITS)].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: ntil_sequence_terms(z, runs, emd_only, None, 0.1).sum(), (digit_logits,))


def test_ntil_micro_batch_values_add_up_to_the_whole_batch():
    logits, labels = make_batch(seed=12, texts=RUN_TEXTS)
    loss = build("ntil")
    whole = loss(logits, labels)
    n_tok, n_dig = whole.metrics["n_tokens"], whole.metrics["n_digits"]
    parts = [loss(logits[rows], labels[rows], n_tok, n_dig) for rows in (slice(0, 2), slice(2, 5))]
    # equal up to the 1e-10 guard of CE / (term + 1e-10), which each call applies to its own term
    assert sum(p.loss.item() for p in parts) == pytest.approx(whole.loss.item(), rel=1e-9)


def test_ntil_noise_is_seeded_by_the_step():
    """The noise moves the straight-through argmaxes, so it shows in the gradient (the value is
    lambda x CE whatever the term)."""
    logits, labels = make_batch(seed=13, texts=RUN_TEXTS, scale=0.003)

    def gradient(loss, step):
        loss.set_step(step)
        z = logits.clone().requires_grad_(True)
        loss(z, labels).loss.backward()
        return z.grad

    first, second = build("ntil", noise_scale=0.01), build("ntil", noise_scale=0.01)
    assert torch.equal(gradient(first, 5), gradient(second, 5))
    assert (gradient(second, 6) - gradient(first, 5)).abs().max() > 1e-6
    quiet = gradient(build("ntil", noise_scale=0.0), 5)
    assert (quiet - gradient(first, 5)).abs().max() > 1e-6


@pytest.mark.parametrize("name", ["ntil", "number_level"])
def test_multi_digit_vocabularies_are_refused_with_the_reason(name):
    wide = (tuple(range(100, 200)),)
    with pytest.raises(ValueError, match="multi-digit tokens"):
        build_loss(name, DigitVocab(tuple(range(10)), 10, wide_ids=wide))


# --- vocab-sharded logits: the shards run in threads, the reducer sums their buffers ---------------
class _ThreadReducer:
    """All-reduce over the threads of one simulated tensor-parallel group."""

    def __init__(self, parts):
        self.barrier = threading.Barrier(parts)
        self.slots = [None] * parts

    def _reduce(self, tensor, rank, op):
        self.slots[rank] = tensor.clone()
        self.barrier.wait()
        reduced = op(torch.stack(self.slots))
        self.barrier.wait()
        tensor.copy_(reduced)
        return tensor


class _RankReducer:
    def __init__(self, group, rank):
        self.group, self.rank = group, rank

    def max_(self, tensor):
        return self.group._reduce(tensor, self.rank, lambda x: x.max(0).values)

    def sum_(self, tensor):
        return self.group._reduce(tensor, self.rank, lambda x: x.sum(0))


def _sharded(loss, logits, labels, parts):
    group = _ThreadReducer(parts)
    results = [None] * parts

    def run(rank):
        start, end = vocab_range(V, rank, parts)
        shard = logits[..., start:end].clone().requires_grad_(True)
        out = loss(shard, labels, vocab_slice=VocabSlice(start, end, V, _RankReducer(group, rank)))
        out.loss.backward()
        results[rank] = (out.loss.detach(), shard.grad)

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(parts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("name", NEWER)
def test_vocab_sharded_logits_equal_full_logits(name, parts):
    logits, labels = make_batch(seed=14, texts=RUN_TEXTS)
    loss = build(name, **({"reweigh": True} if name == "number_level" else {}))
    full = logits.clone().requires_grad_(True)
    whole = loss(full, labels)
    whole.loss.backward()
    results = _sharded(loss, logits, labels, parts)
    for value, _ in results:
        assert value.item() == pytest.approx(whole.loss.item(), rel=1e-12)
    torch.testing.assert_close(torch.cat([grad for _, grad in results], -1), full.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name", NEWER)
def test_chunked_path_equals_logits_path_with_reweigh(name):
    g = torch.Generator().manual_seed(15)
    labels = torch.tensor([encode(t) for t in RUN_TEXTS])
    hidden = torch.randn(*labels.shape, 6, generator=g, dtype=torch.float64)
    weight = 2 * torch.randn(V, 6, generator=g, dtype=torch.float64)
    loss = build(name, **({"reweigh": True} if name == "number_level" else {}))
    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    dense = loss(h1 @ w1.T, labels)
    dense.loss.backward()
    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    chunked = loss.from_hidden(h2, w2, labels, chunk_size=4)
    chunked.loss.backward()
    assert chunked.loss.item() == pytest.approx(dense.loss.item(), rel=1e-12)
    torch.testing.assert_close(h2.grad, h1.grad, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=1e-10, atol=1e-13)


# --- V_num on the real vocabularies, against the released rule ------------------------------------
def _released_numeric_ids(tok, max_value=999):
    """The released rule: v in 0..max_value whose str(v) encodes to exactly one token."""
    ids = []
    for v in range(max_value + 1):
        encoded = tok(str(v), add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.append(encoded[0])
    return ids


@pytest.mark.slow
@pytest.mark.parametrize("name, size", [("qwen2", 10), ("llama-bpe", 1000), ("llama-spm", 10)])
def test_smmd_numeric_vocabulary_is_the_released_rule(name, size):
    from helpers.shared import real_tokenizer

    tok = real_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok)
    loss = build_loss("smmd", vocab)
    ours = [vocab.number_ids[c] for c in loss.numeric_columns.tolist()]
    assert len(ours) == size
    released = _released_numeric_ids(tok)
    if name == "llama-spm":  # "5" is '▁' + '5': the released rule finds nothing; we take the digits
        assert released == []
        assert ours == list(vocab.digit_ids)
    else:
        assert ours == released


# --- NTIL's whole-batch rescaling over micro-batches and ranks ------------------------------------
def _ntil_step(loss, logits, labels, parts_by_rank):
    """One step over ``parts_by_rank`` (per rank, the row slices of its micro-batches): the
    pre-pass, then each micro-batch's loss and backward. (summed loss, logits gradient)."""
    z = logits.clone().requires_grad_(True)
    whole = build("mle")(logits, labels).metrics
    n_tok, n_dig = whole["n_tokens"], whole["n_digits"]

    def unit_terms(rows):
        out = loss(z[rows], labels[rows], n_tok, n_dig)
        return torch.stack([out.ce, out.aux])

    rank_totals = []
    for parts in parts_by_rank:  # every rank's own pre-pass sums, then the all-reduce
        loss.begin_step_totals()
        rank_totals.append(sum(unit_terms(rows).detach().double() for rows in parts))
    all_reduced = sum(rank_totals)
    total = 0.0
    for parts in parts_by_rank:
        loss.set_step_totals(all_reduced)
        for rows in parts:
            out = loss(z[rows], labels[rows], n_tok, n_dig)
            out.loss.backward()
            total += out.loss.item()
    loss.set_step_totals(None)
    return total, z.grad


def test_ntil_with_the_step_totals_micro_batches_and_ranks_equal_the_whole_batch():
    logits, labels = make_batch(seed=16, texts=RUN_TEXTS)
    loss = build("ntil")
    z = logits.clone().requires_grad_(True)
    whole = loss(z, labels)
    whole.loss.backward()
    two_ranks = [[slice(0, 1), slice(1, 3)], [slice(3, 4), slice(4, 5)]]
    total, grad = _ntil_step(loss, logits, labels, two_ranks)
    assert total == pytest.approx(whole.loss.item(), rel=1e-9)
    torch.testing.assert_close(grad, z.grad, rtol=1e-8, atol=1e-12)
    # the broken variant: each micro-batch scaled by its own CE / term
    z2 = logits.clone().requires_grad_(True)
    n_tok, n_dig = whole.metrics["n_tokens"], whole.metrics["n_digits"]
    for rows in (slice(0, 1), slice(1, 3), slice(3, 5)):
        loss(z2[rows], labels[rows], n_tok, n_dig).loss.backward()
    assert (z2.grad - z.grad).abs().max() > 1e-3


def test_ntil_step_totals_replay_the_noise_and_are_cleared():
    from del_core.losses.step_totals import measure_step_totals

    logits, labels = make_batch(seed=17, texts=RUN_TEXTS, scale=0.003)  # the noise moves argmaxes
    loss = build("ntil", noise_scale=0.01)
    loss.set_step(3)
    n = build("mle")(logits, labels).metrics
    parts = [slice(0, 2), slice(2, 5)]

    def unit_terms(rows):
        out = loss(logits[rows], labels[rows], n["n_tokens"], n["n_digits"])
        return torch.stack([out.ce, out.aux])

    measure_step_totals(loss, parts, unit_terms, lambda t: t)
    assert loss.noise_calls.item() == 0  # the step's own calls draw the pre-pass's noise again
    outs = [loss(logits[rows], labels[rows], n["n_tokens"], n["n_digits"]) for rows in parts]
    # With the same noise, the terms add up to exactly lambda x the whole batch's CE.
    ce = sum(o.ce.item() for o in outs)
    assert sum(o.aux.item() for o in outs) == pytest.approx(0.3 * ce, rel=1e-9)
    loss.set_step_totals(None)
    alone = loss(logits[parts[0]], labels[parts[0]])
    assert alone.aux.item() == pytest.approx(0.3 * alone.ce.item(), rel=1e-9)


def test_ntil_noise_is_gumbel_distributed_and_finite():
    from del_core.losses.ntil import gumbel_noise, hashed_uniform

    like = torch.zeros(20_000, 10, dtype=torch.float32)
    u = hashed_uniform(like, torch.tensor(12345))
    assert u.min().item() > 0 and u.max().item() < 1
    assert u.mean().item() == pytest.approx(0.5, abs=0.005) and u.var().item() == pytest.approx(1 / 12, rel=0.02)
    g = gumbel_noise(like, torch.tensor(12345), 1.0)
    assert torch.isfinite(g).all()
    assert g.mean().item() == pytest.approx(0.5772, abs=0.02)  # the Euler-Mascheroni constant
    assert not torch.equal(hashed_uniform(like, torch.tensor(1)), hashed_uniform(like, torch.tensor(2)))


def test_ntil_with_noise_compiles_to_one_graph_and_draws_like_eager():
    from torch._dynamo.testing import CompileCounter

    logits, labels = make_batch(seed=18, texts=RUN_TEXTS, scale=0.003)
    eager, compiled_loss = build("ntil", noise_scale=0.01), build("ntil", noise_scale=0.01)
    counter = CompileCounter()
    compiled = torch.compile(lambda z, y: compiled_loss(z, y).loss, backend=counter, fullgraph=True)

    def gradient(call, z):
        z = z.clone().requires_grad_(True)
        call(z, labels).backward()
        return z.grad

    grads = []
    for step in (4, 5):
        eager.set_step(step)
        compiled_loss.set_step(step)
        for _ in range(2):  # two calls of a step: two draws
            grads.append(gradient(lambda z, y: eager(z, y).loss, logits))
            torch.testing.assert_close(gradient(compiled, logits), grads[-1], rtol=1e-10, atol=1e-12)
    assert counter.frame_count == 1
    assert (grads[0] - grads[1]).abs().max() > 1e-6 and (grads[0] - grads[2]).abs().max() > 1e-6
