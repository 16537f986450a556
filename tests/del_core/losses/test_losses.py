"""Loss values against hand-written references, gradients against finite differences or closed
forms, micro-batch invariance with global normalisers, dtypes, and bad input."""

import math

import pytest
import torch

from del_core import LOSS_NAMES, DigitVocab, build_loss
from helpers.toy_vocab import DIGITS, OTHER, TEXTS, VOCAB, H, V, build, cost_embedding, make_batch

# The losses scored per number or per sequence have their own references (test_newer_losses.py).
PER_POSITION = [name for name in LOSS_NAMES if name not in ("number_level", "smmd", "ntil")]


# --- independent reference, plain Python floats ---------------------------------------------------
def softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    s = sum(e)
    return [x / s for x in e]


def reference_positions(texts):
    """(row, col, digit or None, u) for every non-ignored position, from the spec's table."""
    out = []
    for r, text in enumerate(texts):
        col = 0
        while col < len(text):
            ch = text[col]
            if ch == "_":
                col += 1
                continue
            if ch.isdigit() or ch == ".":
                end = col
                while end < len(text) and (text[end].isdigit() or text[end] == "."):
                    end += 1
                span = text[col:end]
                p = span.find(".") if "." in span else len(span)
                for j, c in enumerate(span):
                    if c == ".":
                        out.append((r, col + j, None, 0.0))
                    else:
                        u = 2.0 * (p - j) if j < p else 1.02 ** -(j - p + 1)
                        out.append((r, col + j, int(c), u))
                col = end
            else:
                out.append((r, col, None, 0.0))
                col += 1
    return out


def reference_loss(name, logits, labels, texts, weight=None, eta=0.5, tau=1.0):
    z = logits.double().tolist()
    positions = reference_positions(texts)
    ce_terms, token_terms, digit_terms = [], [], []
    for r, c, digit, u in positions:
        row = z[r][c]
        y = int(labels[r, c])
        lse = max(row) + math.log(sum(math.exp(x - max(row)) for x in row))
        ce = lse - row[y]
        ce_terms.append(ce)
        if name == "mixce":
            token_terms.append((eta + (1 - eta) * math.exp(-ce)) * ce)
        if name == "emo":
            E = cost_embedding().tolist()
            E = [[x / math.sqrt(sum(v * v for v in e)) for x in e] for e in E]
            q = softmax(row)
            qe = [sum(q[v] * E[v][h] for v in range(V)) for h in range(H)]
            emo = 1 - sum(E[y][h] * (qe[h] - q[y] * E[y][h]) for h in range(H))
            token_terms.append(0.5 * (ce + ce / (emo + 1e-15) * emo))  # value: equals ce
        if digit is None:
            continue
        zd = [row[d] for d in DIGITS]
        q = softmax(zd)
        if name == "del":
            bce = [math.log1p(math.exp(-x)) if d == digit else math.log1p(math.exp(x)) for d, x in enumerate(zd)]
            digit_terms.append(u * sum(qd * b for qd, b in zip(q, bce)))
        elif name == "ntl_was":
            digit_terms.append(sum(qd * abs(digit - d) for d, qd in enumerate(q)))
        elif name == "ntl_mse":
            digit_terms.append((sum(qd * d for d, qd in enumerate(q)) - digit) ** 2)
        elif name == "dist2":
            t = softmax([-((digit - d) ** 2) / tau for d in range(10)])
            digit_terms.append(sum(td * (math.log(td) - math.log(qd)) for td, qd in zip(t, q)))
    n_tok, n_dig = len(ce_terms), max(len(digit_terms), 1)
    loss = sum(token_terms or ce_terms) / n_tok
    if digit_terms:
        loss += weight * sum(digit_terms) / n_dig
    return loss, sum(ce_terms) / n_tok


@pytest.mark.parametrize("name", PER_POSITION)
def test_value_matches_reference(name):
    logits, labels = make_batch()
    weight = {"del": 0.128, "ntl_was": 0.3, "ntl_mse": 0.3, "dist2": 0.1}.get(name)
    out = build(name)(logits, labels)
    expected, expected_ce = reference_loss(name, logits, labels, TEXTS, weight)
    assert out.loss.item() == pytest.approx(expected, rel=1e-10)
    assert out.ce.item() == pytest.approx(expected_ce, rel=1e-10)
    assert (out.ce + out.aux).item() == pytest.approx(out.loss.item(), rel=1e-12)
    assert out.metrics["n_tokens"] == 30 and out.metrics["n_digits"] == 11


def test_del_hand_computed_single_position():
    """One digit position, digit logits z = [0, ln 3, 0, ...], target 1, units place (u = 2)."""
    vocab = DigitVocab(tuple(range(10)), 10)
    logits = torch.zeros(1, 1, 11, dtype=torch.float64)
    logits[0, 0, 1] = math.log(3)
    labels = torch.tensor([[1]])
    out = build_loss("del", vocab, weight=1.0)(logits, labels)
    # softmax over the 10 digits: q1 = 3/12, others 1/12. BCE(0, 0) = ln 2; BCE(ln 3, 1) = ln(4/3).
    digit_term = 2 * (3 / 12 * math.log(4 / 3) + 9 * (1 / 12) * math.log(2))
    ce = math.log(3 + 10) - math.log(3)  # full softmax over 11 tokens
    assert out.aux.item() == pytest.approx(digit_term, rel=1e-12)
    assert out.loss.item() == pytest.approx(ce + digit_term, rel=1e-12)


def test_del_reproduces_released_function_on_one_micro_batch():
    """Released: CE + alpha * mean over the N_digit x 10 elements of u * q * BCE; lambda = alpha/10."""
    logits, labels = make_batch(seed=3)
    alpha = 0.01
    flat = logits.reshape(-1, V)
    ce = torch.nn.functional.cross_entropy(flat, labels.reshape(-1), ignore_index=-100)
    rows = [(r, c, d, u) for r, c, d, u in reference_positions(TEXTS) if d is not None]
    zd = torch.stack([logits[r, c, list(DIGITS)] for r, c, _, _ in rows])
    onehot = torch.nn.functional.one_hot(torch.tensor([d for *_, d, _ in rows]), 10).double()
    u = torch.tensor([u for *_, u in rows], dtype=torch.float64)
    elements = (
        u[:, None]
        * torch.softmax(zd, -1)
        * torch.nn.functional.binary_cross_entropy_with_logits(zd, onehot, reduction="none")
    )
    released = ce + alpha * elements.mean()
    ours = build_loss("del", VOCAB, weight=alpha / 10)(logits, labels).loss
    assert ours.item() == pytest.approx(released.item(), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mle", "del", "ntl_was", "ntl_mse", "dist2"])
def test_gradcheck_float64(name):
    """These losses have no detached parts, so their gradient is the derivative of their value."""
    logits, labels = make_batch(texts=["a12.5b", "_3.7_x"], scale=1.0)
    logits.requires_grad_(True)
    loss_fn = build(name)
    assert torch.autograd.gradcheck(lambda z: loss_fn(z, labels).loss, (logits,), eps=1e-6, atol=1e-7)


@pytest.mark.slow
def test_dist2_place_weighted_gradcheck_and_value():
    logits, labels = make_batch(texts=["a12.5b", "_3.7_x"], scale=1.0)
    plain = build("dist2", weight=1.0)(logits, labels)
    weighted_fn = build("dist2", weight=1.0, place_weighted=True)
    weighted = weighted_fn(logits, labels)
    # Place indices of "12.5" and "3.7": 2 1 . 1 and 1 . 1 -> only the '1' of "12" has k = 2.
    from del_core.losses.digit_terms import dist2_term

    z = logits[0, 1, list(DIGITS)].unsqueeze(0)
    extra = dist2_term(z, torch.tensor([1])).item() / 5  # n_digits = 5
    assert (weighted.aux - plain.aux).item() == pytest.approx(extra, rel=1e-10)
    logits.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: weighted_fn(z, labels).loss, (logits,), eps=1e-6, atol=1e-7)


def test_mixce_gradient_closed_form():
    """d/dz of MixCE = w_t (softmax(z_t) - onehot(y_t)) / N with w_t = eta + (1 - eta) p_t, p detached."""
    logits, labels = make_batch(scale=1.0)
    logits.requires_grad_(True)
    build("mixce", eta=0.3)(logits, labels).loss.backward()
    valid = labels != -100
    safe = labels.clamp_min(0)
    q = torch.softmax(logits.detach(), -1)
    p = q.gather(-1, safe[..., None])[..., 0]
    w = (0.3 + 0.7 * p) * valid
    expected = w[..., None] * (q - torch.nn.functional.one_hot(safe, V)) / valid.sum()
    torch.testing.assert_close(logits.grad, expected, rtol=1e-10, atol=1e-12)


def test_emo_gradient_closed_form():
    """EMO's value equals CE; its gradient is 0.5 (dCE + (ce/emo) d emo), with
    d emo / dz_w = -q_w (c_w - sum_v q_v c_v), c_v = <e_y, e_v> (rows of E normalised)."""
    logits, labels = make_batch(scale=1.0)
    logits.requires_grad_(True)
    out = build("emo")(logits, labels)
    out.loss.backward()
    valid = labels != -100
    safe = labels.clamp_min(0)
    z = logits.detach()
    q = torch.softmax(z, -1)
    E = torch.nn.functional.normalize(cost_embedding(), dim=-1)
    c = E[safe] @ E.T  # [B, T, V]
    q_y = q.gather(-1, safe[..., None])[..., 0]
    emo = 1 - ((q * c).sum(-1) - q_y)  # <e_y, e_y> = 1
    ce = -torch.log(q_y)
    d_ce = q - torch.nn.functional.one_hot(safe, V)
    d_emo = -q * (c - (q * c).sum(-1, keepdim=True))
    expected = 0.5 * (d_ce + (ce / (emo + 1e-15))[..., None] * d_emo) * valid[..., None] / valid.sum()
    torch.testing.assert_close(logits.grad, expected, rtol=1e-9, atol=1e-12)
    assert out.aux.item() == pytest.approx(0.0, abs=1e-12)


# NTIL rescales each call's term by that call's CE / term: test_newer_losses.py checks its sums.
@pytest.mark.parametrize("name", [name for name in LOSS_NAMES if name != "ntil"])
def test_micro_batches_with_global_normalisers_equal_whole_batch(name):
    logits, labels = make_batch(seed=5)
    loss_fn = build(name)
    whole_logits = logits.clone().requires_grad_(True)
    whole = loss_fn(whole_logits, labels)
    whole.loss.backward()
    n_tok, n_dig = whole.metrics["n_tokens"], whole.metrics["n_digits"]
    split_logits = logits.clone().requires_grad_(True)
    total = 0.0
    for rows in (slice(0, 1), slice(1, 4)):  # micro-batches of unequal size
        part = loss_fn(split_logits[rows], labels[rows], num_tokens=n_tok, num_digits=n_dig)
        part.loss.backward()
        total += part.loss.item()
    assert total == pytest.approx(whole.loss.item(), rel=1e-12)
    torch.testing.assert_close(split_logits.grad, whole_logits.grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_low_precision_logits_are_computed_in_fp32(name, dtype):
    logits, labels = make_batch(seed=7, dtype=dtype)
    low = logits.clone().requires_grad_(True)
    out = build(name)(low, labels)
    out.loss.backward()
    ref_logits = logits.float().requires_grad_(True)
    ref = build(name)(ref_logits, labels)
    ref.loss.backward()
    assert out.loss.dtype == torch.float32
    assert out.loss.item() == ref.loss.item()
    assert low.grad.dtype == dtype
    torch.testing.assert_close(low.grad, ref_logits.grad.to(dtype))


def test_metrics_hand_computed():
    vocab = DigitVocab(tuple(range(10)), 10)
    logits = torch.zeros(1, 3, 12)
    logits[0, 0, 4] = 5.0  # predicts '4', target '4'
    logits[0, 1, 2] = 5.0  # predicts '2', target '7'
    labels = torch.tensor([[4, 7, 11]])
    out = build_loss("mle", vocab)(logits, labels)
    q = torch.softmax(torch.tensor([0.0] * 4 + [5.0] + [0.0] * 5), 0)
    entropy = -(q * q.log()).sum().item()
    assert out.metrics["digit_acc"].item() == 0.5
    assert out.metrics["n_digits"].item() == 2 and out.metrics["n_tokens"].item() == 3
    assert out.metrics["digit_entropy"].item() == pytest.approx(entropy, rel=1e-6)


# --- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_all_labels_ignored_gives_zero_loss_and_zero_grad(name):
    logits, labels = make_batch()
    labels = torch.full_like(labels, -100)
    logits.requires_grad_(True)
    out = build(name)(logits, labels)
    out.loss.backward()
    assert out.loss.item() == 0.0 and out.metrics["n_tokens"] == 0
    assert torch.count_nonzero(logits.grad) == 0


@pytest.mark.parametrize("name", ["del", "ntl_was", "ntl_mse", "dist2"])
def test_no_digits_gives_zero_aux(name):
    logits, labels = make_batch(texts=["abcd", "ef_g"])
    out = build(name)(logits, labels)
    mle = build("mle")(logits, labels)
    assert out.aux.item() == 0.0 and out.loss.item() == mle.loss.item()
    assert out.metrics["n_digits"] == 0 and out.metrics["digit_entropy"] == 0


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_masked_vocabulary_entries_with_minus_inf_stay_finite(name):
    logits, labels = make_batch(seed=2)
    logits[..., V - 1] = -math.inf  # an id no label uses, e.g. a padded LM-head row
    logits[0, 0, DIGITS[3]] = -math.inf  # a digit column at a non-digit position
    logits.requires_grad_(True)
    out = build(name)(logits, labels)
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(logits.grad).all()


def test_nan_logits_raise_with_position():
    logits, labels = make_batch()
    logits[1, 2, 5] = float("nan")
    with pytest.raises(FloatingPointError, match=r"first at position \(6,\)|position"):
        build("del", validate="sync")(logits, labels)


def test_inf_at_target_raises():
    logits, labels = make_batch()
    logits[0, 0, OTHER] = -math.inf
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        build("mle", validate="sync")(logits, labels)


def test_label_outside_vocab_names_position_and_value():
    logits, labels = make_batch()
    labels[1, 3] = V + 7
    with pytest.raises(ValueError, match=rf"label {V + 7} at position \(1, 3\)"):
        build("mle", validate="sync")(logits, labels)
    labels[1, 3] = -5
    with pytest.raises(ValueError, match=r"label -5 at position \(1, 3\)"):
        build("del", validate="sync")(logits, labels)


@pytest.mark.parametrize("bad", [V, V + 7, -5])
def test_label_outside_vocab_fails_the_device_side_check(bad):
    """The default check is a device-side assertion: on CPU a RuntimeError naming the check."""
    logits, labels = make_batch()
    build("del")(logits, labels)  # the same batch with valid labels passes
    labels[1, 3] = bad
    with pytest.raises(RuntimeError, match=rf"neither token ids of the logits' vocabulary \[0, {V}\)"):
        build("del")(logits, labels)


def test_shape_and_dtype_errors():
    logits, labels = make_batch()
    with pytest.raises(ValueError, match="plus one last dimension"):
        build("del")(logits[:, :-1], labels)
    with pytest.raises(TypeError, match="floating point"):
        build("del")(labels[..., None].expand(-1, -1, V), labels)
    with pytest.raises(TypeError, match="int64"):
        build("del")(logits, labels.float())


def test_digit_ids_must_fit_the_logits():
    logits, labels = make_batch()
    with pytest.raises(ValueError, match="outside the logits"):
        build("del")(logits[..., :45], labels.clamp(max=44))


def test_global_normaliser_smaller_than_local_count_is_an_error():
    logits, labels = make_batch()
    with pytest.raises(ValueError, match="num_digits=3 is smaller than the 11"):
        build("del", validate="sync")(logits, labels, num_tokens=100, num_digits=3)
    for mode in ("sync", "async"):
        with pytest.raises(ValueError, match="num_tokens must be a count >= 0"):
            build("del", validate=mode)(logits, labels, num_tokens=-1)
    # the default (device-side) check, with Python and tensor normalisers
    build("del")(logits, labels, num_tokens=100, num_digits=11)  # exactly the local count passes
    for small in (3, torch.tensor(3), torch.tensor(-1.0), torch.tensor(float("nan"))):
        with pytest.raises(RuntimeError, match="num_digits is smaller than the count of this batch"):
            build("del")(logits, labels, num_tokens=100, num_digits=small)


def test_validate_modes():
    assert build("del").validate == "async" and build("del", validate=True).validate == "async"
    assert build("del", validate=False).validate == "off"
    with pytest.raises(ValueError, match="validate must be one of async, sync, off"):
        build("del", validate="strict")


def test_validate_off_gives_same_values():
    logits, labels = make_batch()
    on = build("del")(logits, labels)
    off = build("del", validate=False)(logits, labels)
    on_host = build("del", validate="sync")(logits, labels)
    assert on.loss.item() == off.loss.item() == on_host.loss.item()


def test_build_loss_errors():
    with pytest.raises(ValueError, match="unknown loss 'foo'; choose one of mle, mixce"):
        build_loss("foo", VOCAB)
    with pytest.raises(TypeError, match="no weight"):
        build_loss("mle", VOCAB, weight=0.1)
    with pytest.raises(TypeError, match="cost_embedding"):
        build_loss("emo", VOCAB)
    with pytest.raises(ValueError, match="needs a DigitVocab"):
        build_loss("del", None)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        build_loss("del", VOCAB, weight=-1.0)
    with pytest.raises(ValueError, match="cost embedding has 3 rows"):
        build_loss("emo", VOCAB, cost_embedding=torch.randn(3, H))(*make_batch())
    assert build_loss("NTL-WAS", VOCAB).weight == 0.3
    assert build_loss("del", VOCAB).weight == 0.128


def test_token_losses_work_without_a_vocab():
    logits, labels = make_batch()
    out = build_loss("mle", None)(logits, labels)
    assert "digit_entropy" not in out.metrics
    assert out.loss.item() == pytest.approx(reference_loss("mle", logits, labels, TEXTS)[0], rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_cross_entropy_matches_torch(dtype):
    """The fused CE + digit-logit function against F.cross_entropy and plain indexing."""
    from del_core.losses.statistics import logit_statistics

    logits, labels = make_batch(seed=11, dtype=dtype)
    flat, target = logits.reshape(-1, V), labels.reshape(-1)
    ids = torch.tensor(DIGITS)
    g_ce = torch.randn(target.shape[0], generator=torch.Generator().manual_seed(1))
    g_dig = torch.randn(target.shape[0], 10, generator=torch.Generator().manual_seed(2))

    ours_in = flat.clone().requires_grad_(True)
    ce, dig, _, _ = logit_statistics(ours_in, target, DIGITS)
    ((ce * g_ce).sum() + (dig * g_dig).sum()).backward()

    ref_in = flat.float().clone().requires_grad_(True)
    ref_ce = torch.nn.functional.cross_entropy(ref_in, target, ignore_index=-100, reduction="none")
    ref_dig = ref_in[:, ids]
    ((ref_ce * g_ce).sum() + (ref_dig * g_dig).sum()).backward()

    torch.testing.assert_close(ce, ref_ce, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dig, ref_dig)
    assert ours_in.grad.dtype == dtype
    torch.testing.assert_close(
        ours_in.grad, ref_in.grad.to(dtype), rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=1e-6
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_row_chunked_logits_equal_one_chunk(dtype):
    """The logits path works through row chunks; chunk boundaries change nothing."""
    from del_core.losses.statistics import logit_statistics

    logits, labels = make_batch(seed=13, dtype=dtype)
    flat, target = logits.reshape(-1, V), labels.reshape(-1)
    emb = cost_embedding().to(dtype)
    results = []
    for chunk in (3, 10_000):
        z = flat.clone().requires_grad_(True)
        ce, dig, exp, _ = logit_statistics(z, target, DIGITS, emb, chunk_size=chunk)
        (ce.sum() + (dig**2).sum() + exp.sum()).backward()
        results.append((ce, dig, exp, z.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=1e-12)
