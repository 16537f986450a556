"""recipes/train.py end to end under DeepSpeed on CPU (gloo): a tiny random Qwen2 with the real
Qwen2 tokenizer, 2 processes unless said otherwise.

Each run costs ~15-30 s (process start-up, imports, DeepSpeed initialisation); the module runs 11.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from del_core.training.records import read_metrics
from helpers.shared import real_tokenizer
from helpers.training import make_tiny_qwen2, records, run_train, tiny_run, train_losses

pytestmark = pytest.mark.launches

RTOL = 1e-5  # fp32 round-off between different reduction orders


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))


@pytest.fixture(scope="module")
def base(tiny_model, tmp_path_factory) -> dict:
    return tiny_run(tiny_model, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def reference(base, tmp_path_factory) -> dict[int, float]:
    """2 ranks, ZeRO-2, loss from full logits: the run the variants are compared with."""
    out = tmp_path_factory.mktemp("ref")
    run_train(2, {**base, "parallel.zero_stage": 2, "run.output_dir": out})
    return train_losses(out)


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=RTOL), (step, a[step], b[step])


def test_zero3_trains_logs_evaluates_and_exports(base, reference, tmp_path):
    """ZeRO-3, gradient checkpointing on: same losses as ZeRO-2; the exported HF model reloads and
    gives the held-out CE that training measured with the engine's final weights."""
    out = tmp_path / "run"
    overrides = {
        **base,
        "parallel.zero_stage": 3,
        "model.gradient_checkpointing": "true",
        "run.export": "true",
        "data.eval_size": 7,  # 4 rows on rank 0, 3 and a blank one on rank 1
        "run.output_dir": out,
    }
    proc = run_train(2, overrides)
    _close(train_losses(out), reference)

    rows = records(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert math.isclose(r["loss"], r["ce"] + r["aux"], rel_tol=1e-6)
        assert r["aux"] > 0 and 0 <= r["digit_acc"] <= 1 and r["digit_entropy"] > 0
        assert r["grad_norm"] > 0 and r["tokens_per_s"] > 0 and r["peak_mem_gb"] > 0
        assert r["lr"] == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi * (r["step"] - 1) / 3)))
    (final,) = read_metrics(out, "final")
    assert final.step == 3 and final.before.label == "before" and final.after.label == "after"
    assert final.last.step == 3 and final.last.loss == rows[-1]["loss"]
    assert "Held-out" in proc.stdout

    from transformers import AutoModelForCausalLM

    from del_core import DigitVocab, number_spans
    from del_core.data import collate
    from del_core.evaluation.heldout.teacher_forced import answer_hits, summarise, teacher_forced_sums
    from del_core.tokenizers import load_tokenizer
    from del_core.training import load_train_config
    from del_core.training.trainer import training_data

    assert (out / "final" / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(str(out / "final"), dtype=torch.float32).eval()
    tokenizer = load_tokenizer(out / "final")
    config = load_train_config(None, [f"{k}={v}" for k, v in overrides.items()])
    examples = training_data(config, tokenizer, lambda *_: None).eval_examples
    batch = collate(examples, tokenizer.eos_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    sums = {k: float(v) for k, v in teacher_forced_sums(logits, batch.targets, None).items()}
    assert summarise(sums).ce == pytest.approx(final.after.ce, rel=1e-5)
    assert final.after.ce != pytest.approx(final.before.ce, rel=1e-3)  # training changed the model
    # the logged teacher-forced answer accuracy: every held-out row's last number, in one batch here
    vocab = DigitVocab.from_tokenizer(tokenizer)
    hits = answer_hits(logits, batch.targets, number_spans(batch.targets, vocab), vocab)
    assert final.after.answers == len(examples)
    assert final.after.tf_answer_acc == pytest.approx(hits.float().mean().item())


def test_zero3_chunked_loss_matches(base, reference, tmp_path):
    """The chunked loss (hidden states + gathered LM-head weight, never full logits) under ZeRO-3."""
    out = tmp_path / "run"
    run_train(
        2, {**base, "parallel.zero_stage": 3, "loss.path": "chunked", "loss.chunk_size": 37, "run.output_dir": out}
    )
    _close(train_losses(out), reference)


def test_compiled_loss_matches(base, reference, tmp_path):
    """loss.compile=true (aot_eager: dynamo + AOTAutograd, the same ATen ops, fast to compile
    here; inductor is the default) trains to the same losses on the chunked path, batches of
    varying padded length going through one graph with a fixed chunk count (a graph break would be
    an error). Both paths' graphs, inductor included: tests/del_core/losses/test_compile.py."""
    out = tmp_path / "run"
    overrides = {"loss.compile": "true", "loss.compile_backend": "aot_eager", "loss.path": "chunked"}
    proc = run_train(1, {**base, **overrides, "loss.chunk_size": 37, "run.output_dir": out})
    assert "torch.compile(del, backend=aot_eager" in proc.stdout + proc.stderr
    _close(train_losses(out), reference)


def test_compacted_loss_matches(base, reference, tmp_path):
    """loss.compact=true (the LM head and the loss on the answers' positions alone; the synthetic
    rows are mostly prompt) trains to the same losses as the full logits, in one process."""
    out = tmp_path / "run"
    proc = run_train(1, {**base, "loss.compact": "true", "run.output_dir": out})
    assert "[loss] compacted: the LM head and the loss run on the scored positions alone" in proc.stdout + proc.stderr
    _close(train_losses(out), reference)


@pytest.mark.parametrize("path", ["logits", "chunked"])
def test_zero3_compacted_loss_matches(base, reference, tmp_path, path):
    """loss.compact=true under ZeRO-3: on the logits path the LM-head module's own hooks gather its
    partitioned (tied) weight for the gathered rows; on the chunked path the loss reads the weight
    once per micro-batch, gathered for the objective's forward and backward, whatever the chunks."""
    out = tmp_path / "run"
    overrides = {"parallel.zero_stage": 3, "loss.compact": "true", "loss.path": path, "loss.chunk_size": 37}
    run_train(2, {**base, **overrides, "run.output_dir": out})
    _close(train_losses(out), reference)


def test_padding_free_micro_batches_match(base, reference, tmp_path):
    """data.padding_free=true: each micro-batch's examples in one row without padding, the model
    run without an attention mask, and with loss.compact=true on that row (the scored positions
    found on the joined host batch); one process with accumulation 8 instead of 2 ranks with 4
    (tested to be the same): the same step losses as the padded, uncompacted reference."""
    out = tmp_path / "run"
    proc = run_train(1, {**base, "data.padding_free": "true", "loss.compact": "true", "run.output_dir": out})
    assert "padding-free micro-batches" in proc.stdout + proc.stderr
    assert "[loss] compacted" in proc.stdout + proc.stderr
    _close(train_losses(out), reference)


def test_zero3_offload_matches(base, reference, tmp_path):
    out = tmp_path / "run"
    proc = run_train(2, {**base, "parallel.offload": "true", "run.output_dir": out})
    assert "offload" in proc.stdout
    _close(train_losses(out), reference)


def test_accumulation_and_data_parallel_split_do_not_matter(base, tmp_path):
    """1 rank x accumulation 4 and 2 ranks x accumulation 2 over the same global batch of 8: the
    same losses and the same exported weights (fp32 round-off)."""
    from safetensors.torch import load_file

    one, two = tmp_path / "one", tmp_path / "two"
    common = {**base, "parallel.zero_stage": 3, "run.max_steps": 2, "run.export": "true"}
    run_train(1, {**common, "run.output_dir": one})
    run_train(2, {**common, "run.output_dir": two})
    _close(train_losses(one), train_losses(two))
    a, b = load_file(one / "final" / "model.safetensors"), load_file(two / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    initial = load_file(Path(base["model"]) / "model.safetensors")
    moved = 0.0
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=2e-6)
        moved = max(moved, (a[key] - initial[key]).abs().max().item())
    assert moved > 1e-4  # the updates are large enough for the comparison to mean something


def test_ntil_over_micro_batches_and_ranks_equals_one_call_over_the_batch(base, tmp_path):
    """NTIL scales its term by the whole batch's CE / term (the step's pre-pass): 2 ranks x
    accumulation 2 take the steps of 1 rank with the global batch in one micro-batch (ZeRO-3).
    Without the pre-pass (each micro-batch's own CE / term) the weights differ by ~2e-3."""
    from safetensors.torch import load_file

    one, split = tmp_path / "one", tmp_path / "split"
    common = {**base, "loss": "ntil", "loss.options": "{noise_scale: 0.0}", "run.max_steps": 2, "run.export": "true"}
    common["parallel.zero_stage"] = 3  # the pre-pass gathers the partitioned weights too
    run_train(1, {**common, "run.micro_batch_size": 8, "run.output_dir": one})
    run_train(2, {**common, "run.output_dir": split})
    _close(train_losses(one), train_losses(split))
    a, b = load_file(one / "final" / "model.safetensors"), load_file(split / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=2e-6)


def test_resume_after_a_crash_equals_the_uninterrupted_run(base, tmp_path):
    """6 steps straight vs 3 steps + checkpoint, an abrupt exit in step 4, resume=auto (with a
    half-written checkpoint directory lying around): steps 4-6 have identical losses."""
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    common = {
        **base,
        "parallel.zero_stage": 3,
        "run.max_steps": 6,
        "data": "synthetic:24",
        "optimizer.warmup_ratio": 0.2,
    }
    run_train(2, {**common, "run.output_dir": straight})
    run_train(2, {**common, "run.output_dir": crashed, "run.save_every": 3, "run.fail_at_step": 4}, expect_rc=1)
    assert sorted(train_losses(crashed)) == [1, 2, 3]
    torn = crashed / "checkpoints" / "step_000005"
    torn.mkdir()
    (torn / "mp_rank_00_model_states.pt").write_bytes(b"half")
    proc = run_train(2, {**common, "run.output_dir": crashed, "run.save_every": 3, "run.resume": "auto"})
    assert "ignoring" in proc.stdout and "step_000005" in proc.stdout
    assert "continuing from" in proc.stdout and "step 3" in proc.stdout
    expected, resumed = train_losses(straight), train_losses(crashed)
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]
    for step in (4, 5, 6):
        assert resumed[step] == expected[step], (step, resumed[step], expected[step])
    assert not torn.exists()  # pruned once the step-6 checkpoint was complete


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"optimizer.lerning_rate": 1}, "unknown key 'optimizer.lerning_rate'"),
        ({"loss": "foo"}, "loss.name must be one of"),
        ({"model": "/nonexistent/dir"}, "model.name /nonexistent/dir: no such file or directory"),
    ],
)
def test_bad_configuration_is_one_line_before_any_loading(overrides, message):
    proc = run_train(1, overrides, expect_rc=2, timeout=60)
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and message in proc.stderr
    assert "Traceback" not in proc.stderr and "[run]" not in proc.stdout  # nothing heavy started


def test_bad_data_row_is_named(base, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"instruction": "1+1?", "output": "2"}\n{"instruction": "2+2?"}\n')
    proc = run_train(1, {**base, "data": data, "run.output_dir": tmp_path / "run"}, expect_rc=2)
    assert f"{data}: row 2: field 'output' is missing" in proc.stderr
