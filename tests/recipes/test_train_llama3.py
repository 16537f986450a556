"""recipes/train.py with the real Llama-3 vocabulary (``ggml-vocab-llama-bpe.gguf``: number tokens
of 1..3 digits, docs/number_tokens.md) under DeepSpeed ZeRO-3 on CPU (gloo): a tiny
random Llama-3-shaped model whose directory holds that tokenizer (converted from the GGUF file by
del_core.tokenizers, as every real-tokenizer test does).

The step-1 losses are checked against a reference written here from docs/number_tokens.md alone
(the number tokens read off the vocabulary, place values from the spans of the targets, the three
terms on the width groups, the initial weights), so a multi-digit term that were silently zero,
scored on the wrong columns or normalised by the wrong count would fail. GPT-2's vocabulary must be
refused with its reason before anything is trained.

The module runs one 3-step DEL run with 2 processes (~20 s: start-up, imports, DeepSpeed
initialisation), two 1-step runs in one process (~12 s each) and a refusal that stops before the
model is loaded (~7 s): about 65 s in all on 2 cores.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.shared import real_tokenizer, vocab_file
from helpers.training import make_tiny_llama3, records, run_train, tiny_run

IGNORE = -100
WEIGHT = 0.25  # lambda of every run here (explicit: the test does not depend on the defaults)
TAU = 1.0  # DIST2's temperature (the default, passed explicitly)
DATA = "synthetic:24"  # 3 global batches of 8: the 3 steps see every item exactly once
STEPS, GLOBAL_BATCH, MICRO_BATCH, RANKS = 3, 8, 2, 2
VOCAB_LINE = "[vocab] multi-digit (1110 number tokens of widths 1..3, left to right in groups of 3)"
REL = 1e-5  # fp32 logits of the engine (padded micro-batches, ZeRO-3 gathers) vs one sequence at a time


@pytest.fixture(scope="module")
def llama3():
    return real_tokenizer("llama-bpe")


@pytest.fixture(scope="module")
def tiny_model(llama3, tmp_path_factory) -> Path:
    return make_tiny_llama3(tmp_path_factory.mktemp("tiny-llama3"), llama3)


@pytest.fixture(scope="module")
def base(tiny_model, tmp_path_factory) -> dict:
    return tiny_run(
        tiny_model,
        tmp_path_factory.mktemp("cache"),
        data=DATA,
        **{
            "run.max_steps": STEPS,
            "run.global_batch_size": GLOBAL_BATCH,
            "run.micro_batch_size": MICRO_BATCH,
            "parallel.zero_stage": 3,
            "loss.weight": WEIGHT,
        },
    )


# --- the independent reference ------------------------------------------------------------------
def number_groups(tokenizer) -> dict[int, list[int]]:
    """Width -> the ids of the 10^w tokens of that width, by value ('007' is value 7 of width 3),
    read off the vocabulary: every token whose text is ASCII digits."""
    digits = {text: tid for text, tid in tokenizer.get_vocab().items() if text.isascii() and text.isdigit()}
    widths = sorted({len(text) for text in digits})
    groups = {w: [digits[str(v).zfill(w)] for v in range(10**w)] for w in widths}
    assert sum(map(len, groups.values())) == len(digits)  # no other digit tokens
    return groups


def place_values(targets: list[int], width: dict[int, int], point: int) -> list[float]:
    """u per position (docs/number_tokens.md s.2): spans are maximal runs of number or point
    targets; before the span's first point u = 2k, k = 1 + the widths of the tokens between it and
    the point; after it u = 1.02^-(m + 1), m the places from the point through the token (a number
    token counts its width, a point 1); 0 at points and outside spans."""
    u = [0.0] * len(targets)
    start = 0
    while start < len(targets):
        if targets[start] not in width and targets[start] != point:
            start += 1
            continue
        end = start
        while end < len(targets) and (targets[end] in width or targets[end] == point):
            end += 1
        span = targets[start:end]
        p = span.index(point) if point in span else len(span)
        for j, tid in enumerate(span):
            if tid == point:
                continue
            if j < p:
                u[start + j] = 2.0 * (1 + sum(width[t] for t in span[j + 1 : p]))
            else:
                m = sum(width.get(t, 1) for t in span[p + 1 : j + 1])
                u[start + j] = 1.02 ** -(m + 1)
        start = end
    return u


@dataclass
class StepReference:
    """Sums over the targets of one global batch, from the initial weights."""

    n_tokens: int
    n_numbers: int
    numbers_by_width: dict[int, int]
    ce_sum: float
    del_sum: float
    del_by_width: dict[int, float]
    ntl_was_sum: float
    dist2_sum: float
    entropy_sum: float
    hits: int

    def aux(self, loss: str) -> float:
        term = {"del": self.del_sum, "ntl_was": self.ntl_was_sum, "dist2": self.dist2_sum}[loss]
        return WEIGHT * term / self.n_numbers


def step_reference(model, examples, groups: dict[int, list[int]], point: int) -> StepReference:
    width = {tid: w for w, ids in groups.items() for tid in ids}
    value = {tid: v for ids in groups.values() for v, tid in enumerate(ids)}
    ref = StepReference(0, 0, dict.fromkeys(groups, 0), 0.0, 0.0, dict.fromkeys(groups, 0.0), 0.0, 0.0, 0.0, 0)
    for example in examples:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([example.input_ids])).logits[0].double()
        targets = torch.tensor(example.targets)
        keep = targets != IGNORE
        ref.n_tokens += int(keep.sum())
        ref.ce_sum += F.cross_entropy(logits[keep], targets[keep], reduction="sum").item()
        u = place_values(example.targets, width, point)
        for pos, tid in enumerate(example.targets):
            if tid not in width:
                continue
            w, y = width[tid], value[tid]
            z = logits[pos, groups[w]]
            c = torch.arange(10**w, dtype=torch.float64)
            log_q = torch.log_softmax(z, -1)
            q = log_q.exp()
            bce = F.binary_cross_entropy_with_logits(z, (c == y).double(), reduction="none")
            term = u[pos] * (q * bce).sum().item()
            log_t = torch.log_softmax(-((y - c) ** 2) / TAU, -1)
            ref.n_numbers += 1
            ref.numbers_by_width[w] += 1
            ref.del_sum += term
            ref.del_by_width[w] += term
            ref.ntl_was_sum += (q * (y - c).abs()).sum().item() / 10 ** (w - 1)
            ref.dist2_sum += (log_t.exp() * (log_t - log_q)).sum().item()
            ref.entropy_sum += -(q * log_q).sum().item()
            ref.hits += int(z.argmax().item() == y)
    return ref


@pytest.fixture(scope="module")
def data(base, llama3):
    """The run's tokenised training items and the item indices of each step."""
    from del_core.training import load_train_config
    from del_core.training.schedule import StepPlan
    from del_core.training.trainer import training_data

    config = load_train_config(None, [f"{k}={v}" for k, v in base.items()])
    items = training_data(config, llama3, lambda *_: None).items
    plan = StepPlan(len(items), GLOBAL_BATCH, MICRO_BATCH, RANKS, config.run.seed)
    return items, [plan.global_batch_items(step) for step in range(STEPS)]


@pytest.fixture(scope="module")
def first_step(tiny_model, llama3, data) -> StepReference:
    from transformers import AutoModelForCausalLM

    items, steps = data
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    point = llama3.get_vocab()["."]
    return step_reference(model, [items[i] for i in steps[0]], number_groups(llama3), point)


def _check_first_step(row: dict, ref: StepReference, loss: str) -> None:
    assert row["step"] == 1
    assert row["n_tokens"] == ref.n_tokens and row["n_digits"] == ref.n_numbers
    assert row["ce"] == pytest.approx(ref.ce_sum / ref.n_tokens, rel=REL)
    assert row["aux"] == pytest.approx(ref.aux(loss), rel=REL)
    assert row["digit_entropy"] == pytest.approx(ref.entropy_sum / ref.n_numbers, rel=REL)
    assert row["digit_acc"] == pytest.approx(ref.hits / ref.n_numbers, abs=1e-9)


# --- the tests ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_vocabulary_read_off_independently(base, llama3, data, first_step):
    """What the reference relies on: Llama-3's 1,110 number tokens, digit runs written in groups of
    3 from the left (so the data's number targets are countable from its text), and a first batch
    that holds targets of every width, the wide ones carrying much of the DEL term."""
    from del_core.data.rows import read_source

    groups = number_groups(llama3)
    assert {w: len(ids) for w, ids in groups.items()} == {1: 10, 2: 100, 3: 1000}
    numbers = {tid for ids in groups.values() for tid in ids}
    items, _ = data
    from_targets = sum(t in numbers for item in items for t in item.targets)
    outputs = [row["output"] for row in read_source(DATA, "train", seed=base["run.seed"])]
    from_text = sum(math.ceil(len(run) / 3) for text in outputs for run in re.findall(r"[0-9]+", text))
    assert len(items) == len(outputs) == 24 and from_targets == from_text > 0
    assert all(n > 0 for n in first_step.numbers_by_width.values())
    assert first_step.del_by_width[2] + first_step.del_by_width[3] > 0.2 * first_step.del_sum > 0


@pytest.mark.launches
def test_del_trains_under_zero3_with_the_llama3_vocabulary(base, llama3, data, first_step, tmp_path):
    """DEL, ZeRO-3, 2 ranks, 3 steps: the multi-digit vocabulary is logged; each step counts
    exactly the number-token and token targets of its items; step 1 (initial weights) has the CE,
    DEL term, entropy and accuracy of the reference; held-out CE falls."""
    from del_core.training.records import read_metrics

    out = tmp_path / "run"
    proc = run_train(RANKS, {**base, "data.eval_size": 4, "run.output_dir": out})
    assert VOCAB_LINE in proc.stdout

    items, steps = data
    numbers = {tid for ids in number_groups(llama3).values() for tid in ids}
    rows = records(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row, indices in zip(rows, steps):
        targets = [t for i in indices for t in items[i].targets if t != IGNORE]
        assert row["n_tokens"] == len(targets)
        assert row["n_digits"] == sum(t in numbers for t in targets) > 0
        for key in ("loss", "ce", "aux", "digit_entropy", "digit_acc", "grad_norm"):
            assert math.isfinite(row[key]), (row["step"], key, row[key])
        assert row["aux"] > 0 and row["loss"] == pytest.approx(row["ce"] + row["aux"], rel=1e-6)
        assert 0 < row["digit_entropy"] <= math.log(1000) and 0 <= row["digit_acc"] <= 1
        assert row["grad_norm"] > 0
    _check_first_step(rows[0], first_step, "del")

    (final,) = read_metrics(out, "final")
    assert final.step == 3 and final.after.digits > 0
    assert final.after.ce < final.before.ce  # the training moved the model the right way


@pytest.mark.launches
@pytest.mark.parametrize("loss", ["ntl_was", "dist2"])
def test_ntl_and_dist2_score_the_llama3_vocabulary(base, first_step, tmp_path, loss):
    """One ZeRO-3 step of NTL-WAS (in units of the token's leading place) and DIST2 (raw token
    values, tau 1), in one process (the same global batch as 4 accumulation micro-batches): the
    logged counts, CE and term are the reference's."""
    out = tmp_path / "run"
    overrides = {**base, "loss": loss, "run.max_steps": 1, "run.output_dir": out}
    if loss == "dist2":
        overrides["loss.options"] = "{tau: 1.0}"
    proc = run_train(1, overrides)
    assert VOCAB_LINE in proc.stdout
    (row,) = records(out)
    _check_first_step(row, first_step, loss)


@pytest.mark.launches
def test_gpt2_vocabulary_is_refused_before_training(base, tiny_model, tmp_path):
    """GPT-2's incomplete, space-glued number tokens: loss del stops with one line naming the
    reason, before the data or the model is loaded."""
    model = tmp_path / "tiny-gpt2-vocab"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        os.symlink(tiny_model / name, model / name)  # 128,257 rows cover GPT-2's 50,257 ids
    real_tokenizer("gpt-2").save_pretrained(str(model))
    out = tmp_path / "run"
    overrides = {**base, "model": model, "loss": "del", "run.output_dir": out}
    proc = run_train(1, overrides, expect_rc=2)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.stderr.count("error: ") == 1 and last.startswith("error: loss del cannot score this tokenizer: ")
    assert "irregular multi-digit vocabulary" in last and "not supported" in last
    assert "width 3: 777 of 1000" in last and "leading space" in last
    assert "Traceback" not in proc.stderr
    assert "[data]" not in proc.stdout and "[model]" not in proc.stdout
    assert not (out / "metrics.jsonl").exists()


@pytest.mark.launches
def test_tokenizer_key_takes_the_gguf_vocabulary(base, tiny_model, tmp_path):
    """``model.tokenizer=<ggml-vocab-llama-bpe.gguf>``: only the vocabulary is read from the file
    (its metadata describes Llama-3-8B, which must not be built)."""
    out = tmp_path / "run"
    gguf = vocab_file("llama-bpe")
    proc = run_train(1, {**base, "model.tokenizer": gguf, "run.max_steps": 1, "run.output_dir": out})
    assert VOCAB_LINE in proc.stdout and [r["step"] for r in records(out)] == [1]
