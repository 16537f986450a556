"""del_core losses inside transformers.Trainer and TRL's SFTTrainer (del_core.integrations), on CPU
with the tiny random Qwen2 and the real Qwen2 tokenizer.

The layouts compared train the same 3 global batches of 8 rows (micro-batches of 2 whose digit
counts are 1, 12, 19 and 14 in the first step) with AdamW, lr 1e-3, gradient clipping at 1:
1 process x accumulation 4 ("1x4"), 1 process x 1 micro-batch of 8 ("1x1", the whole global batch
in one forward), 2 processes x accumulation 2 ("2x2", DDP over gloo), and 2 x 2 under DeepSpeed
ZeRO-3 and ZeRO-2 through the Trainer's ``deepspeed=`` argument (both loss paths), DeepSpeed Ulysses
sequence parallelism (sp=2 with 2 processes, sp=2 x dp=2 with 4) and torch FSDP2 through the
Trainer's ``fsdp=`` arguments (2 x 2 and 4 x 1, gloo on the CPU: the test worker lifts accelerate's
gate that keeps FSDP to GPUs, :func:`hf_trainer_worker.allow_fsdp_on_cpu`). The newer losses
(number_level, SMMD, NTIL) are checked in one batch on both loss paths and under FSDP2 at 2 x 2.
Module time: ~5-6 min on 2 cores shared with other jobs (load ~8; seven subprocess launches).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import hf_trainer_worker as worker
import pytest
import torch

from del_core import build_loss, number_spans
from del_core.integrations import DELTrainer, UnsupportedSetupError
from del_core.integrations.setup_checks import loss_path_problems
from helpers.torchrun import torchrun_command
from helpers.training import make_tiny_qwen2

WORKER = Path(worker.__file__)
REPO = Path(__file__).resolve().parents[3]
TOL = 1e-5  # fp32 round-off between reduction orders, paddings and layouts (losses ~14.7)
STEPS = 3
# The gradient norms (about 2.2) agree to fp32 round-off; DeepSpeed's gradient averaging under SP
# differs per ZeRO stage (del_core.engines.deepspeed.gradient_divisor), FSDP2's reduce-scatter
# divides by the processes: a wrong factor would show here as a norm off by sp or R, which Adam and
# clipping would hide in the weights.
NORM_TOL = 1e-4


def zero_config(stage: int) -> dict:
    """A ZeRO config for the Trainer's ``deepspeed=``: sizes from the TrainingArguments ("auto"),
    the Trainer's torch AdamW, and full weights gathered for saving."""
    return {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {"stage": stage, "stage3_gather_16bit_weights_on_model_save": True},
    }


# FSDP as the paper's release launches it (``--fsdp "full_shard auto_wrap"``), one unit per decoder
# layer; torch FSDP2 (transformers' default).
FSDP = {"fsdp": "full_shard auto_wrap", "fsdp_config": {"transformer_layer_cls_to_wrap": ["Qwen2DecoderLayer"]}}


def layout(name: str, micro: int, accumulation: int, **extra) -> dict:
    return {"name": name, "micro": micro, "accumulation": accumulation, "steps": STEPS, **extra}


# --- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(qwen2_tokenizer, tmp_path_factory) -> Path:
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), qwen2_tokenizer)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from del_core.tokenizers import load_tokenizer

    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def spec(tiny_model, tokenizer, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("runs")
    rows, sft_rows = worker.make_rows(tokenizer, 8 * STEPS), worker.make_sft_rows(8 * STEPS)
    return {"model": str(tiny_model), "out": str(out), "rows": rows, "sft_rows": sft_rows, "runs": []}


def launch(nproc: int, spec: dict, runs: list[dict]) -> None:
    """The worker under torch.distributed.run with ``nproc`` gloo processes on the CPU."""
    path = Path(spec["out"]) / f"spec-{runs[0]['name']}.json"
    path.write_text(json.dumps({**spec, "runs": runs}))
    command = torchrun_command(nproc, WORKER, path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"worker exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")


def result(spec: dict, name: str) -> tuple[list[dict], dict[str, torch.Tensor]]:
    out = Path(spec["out"])
    return json.loads((out / f"{name}.json").read_text()), torch.load(out / f"{name}.pt")


@pytest.fixture(scope="module")
def one_process(spec) -> dict:
    """1x4, 1x1, 1x4 with per-micro-batch digit normalisation, and 1x4 with the loss chunked from
    the hidden states, in this process."""
    runs = [layout("1x4", 2, 4), layout("1x1", 8, 1), layout("1x4-per-micro-batch", 2, 4, variant="per_micro_batch")]
    runs.append(layout("1x4-chunked", 2, 4, loss_path="chunked"))
    for run in runs:
        worker.save(worker.train(spec, run), Path(spec["out"]), run["name"])
    return {run["name"]: result(spec, run["name"]) for run in runs}


@pytest.fixture(scope="module")
def two_processes(spec) -> dict:
    """2x2 (DDP), and 2x2 with digits counted per rank (not all-reduced)."""
    runs = [layout("2x2", 2, 2), layout("2x2-rank-local", 2, 2, variant="rank_local")]
    launch(2, spec, runs)
    return {run["name"]: result(spec, run["name"]) for run in runs}


def engines(spec: dict, name: str) -> dict:
    return json.loads((Path(spec["out"]) / f"{name}.engine.json").read_text())


def loss_gap(a: list[dict], b: list[dict], key: str = "loss") -> float:
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, STEPS + 1))
    return max(abs(x[key] - y[key]) for x, y in zip(a, b))


def weight_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


# --- (1) one batch: the adapter's loss is build_loss on the shifted logits ---------------------
def run_gaps(run: tuple[list[dict], dict], reference: tuple[list[dict], dict]) -> dict:
    """Max abs gaps of a run's (logs, weights) to its reference's: losses, gradient norms, weights."""
    (logs, weights), (reference_logs, reference_weights) = run, reference
    return {
        "loss": loss_gap(logs, reference_logs),
        "grad_norm": loss_gap(logs, reference_logs, "grad_norm"),
        "weights": weight_gap(weights, reference_weights),
    }


def one_batch_trainer(
    tiny_model, tokenizer, rows, tmp_path, loss: str, loss_path: str = "logits", loss_options=None, **extra
) -> DELTrainer:
    from transformers import AutoModelForCausalLM

    args = worker.training_arguments(tmp_path, layout("one", 4, 1))
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    return DELTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        data_collator=worker.collate(tokenizer.pad_token_id),
        processing_class=tokenizer,
        loss=loss,
        loss_path=loss_path,
        loss_options=loss_options,
        chunk_size=5,
        **extra,
    )


NEWER_LOSSES = ("number_level", "smmd", "ntil")
# (name, loss path, options): 3-10 s each on 2 busy cores, past the unit tier's budget (marked slow)
NEWER_LOSS_ONE_BATCH_CASES = [(name, path, None) for name in NEWER_LOSSES for path in ("logits", "chunked")] + [
    ("number_level", "logits", {"float_level": True}),
    ("ntil", "logits", {"noise_scale": 0.0}),
]


def reference_loss(model, batch: dict, name: str, vocab, options: Optional[dict]):
    """``build_loss(name, vocab, **options)`` on the model's logits [B, T, V] of ``batch`` and its
    targets ``labels[:, 1:]`` with one ignored position appended (the last input position predicts
    nothing): the [B, T] grid the adapter scores, whose flat positions key NTIL's Gumbel noise."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = torch.nn.functional.pad(batch["labels"][:, 1:], (0, 1), value=-100)
    return build_loss(name, vocab, **(options or {}))(logits, targets).loss


def parameter_gradients(model, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return grads


def gradient_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in a)


@pytest.mark.parametrize(
    "name, loss_path, options",
    [("del", "logits", None), ("mle", "logits", None), ("del", "chunked", None)]
    + [pytest.param(*case, marks=pytest.mark.slow) for case in NEWER_LOSS_ONE_BATCH_CASES],
)
def test_one_batch_loss_and_gradient_equal_build_loss(name, loss_path, options, tiny_model, tokenizer, spec, tmp_path):
    """No accumulation, one process: the loss the adapter returns (and its gradient) is
    ``build_loss(name, vocab, **options)`` on the model's logits and the shifted labels to 1e-6,
    from the logits or chunked from the hidden states; its window counts are the Trainer's own
    ``num_items_in_batch`` and the labels' digit positions. NTIL with its default Gumbel noise
    (scale 0.01) draws the same noise as that call: its forward value does not show the noise (the
    term is rescaled to 0.3 CE), but the straight-through gradient does (noise off moves it by far
    more than the tolerance, asserted)."""
    trainer = one_batch_trainer(tiny_model, tokenizer, spec["rows"][:4], tmp_path, name, loss_path, options)
    model = trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    _, num_items = trainer.get_batch_samples(iter([batch]), 1, trainer.args.device)
    window = trainer._del_window
    vocab = trainer.del_loss.vocab
    assert int(window.num_tokens) == int(num_items) == int((batch["labels"][:, 1:] != -100).sum())
    assert int(window.num_digits) == int(number_spans(batch["labels"][:, 1:], vocab).is_digit.sum()) > 0

    loss = trainer.compute_loss(model, dict(batch))
    grads = parameter_gradients(model, loss)
    reference = reference_loss(model, batch, name, vocab, options)
    reference_grads = parameter_gradients(model, reference)
    # The chunked path multiplies hidden states by the head in chunks: the same fp32 sums in another
    # order (measured gaps ~1.5e-6 in the gradients, machine-dependent).
    tol = 1e-6 if loss_path == "logits" else 1e-5
    assert abs(loss.item() - reference.item()) <= tol, (loss.item(), reference.item())
    assert gradient_gap(grads, reference_grads) <= tol
    if name == "ntil" and options is None:
        noiseless = parameter_gradients(model, reference_loss(model, batch, name, vocab, {"noise_scale": 0.0}))
        assert gradient_gap(grads, noiseless) > 100 * tol, gradient_gap(grads, noiseless)


def one_batch_loss_and_gradients(
    trainer: DELTrainer, batch: dict, logits_shapes: Optional[list] = None
) -> tuple[float, dict[str, torch.Tensor]]:
    """The loss ``compute_loss`` returns for ``batch`` as the one micro-batch of a step, and the
    gradient of every parameter; ``logits_shapes`` gets the logits' shape of each forward of
    ``compute_loss``."""
    model = trainer.model.train()
    trainer.get_batch_samples(iter([batch]), 1, trainer.args.device)
    if logits_shapes is not None:
        model.register_forward_hook(lambda module, args, out: logits_shapes.append(tuple(out.logits.shape)))
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


COMPACTED = [(name, path) for name in ("del", "number_level", "ntil") for path in ("logits", "chunked")]


@pytest.mark.parametrize("name, loss_path", COMPACTED)
def test_one_batch_compacted_loss_and_gradient_equal_the_full_path(
    name, loss_path, tiny_model, tokenizer, spec, tmp_path
):
    """``compact=True``: the LM head and the loss on the scored positions alone give the full
    path's loss and gradients (the full path is ``build_loss`` on the shifted logits, above), for
    the losses that read the number structure (DEL's spans, the number-level runs, NTIL's step
    totals and noise) on both paths. The forward keeps the last position's logits only."""
    rows = spec["rows"][:4]
    options = {"loss_options": {"noise_scale": 0.5}} if name == "ntil" else {}
    full = one_batch_trainer(tiny_model, tokenizer, rows, tmp_path / "full", name, loss_path, **options)
    compact = one_batch_trainer(
        tiny_model, tokenizer, rows, tmp_path / "compact", name, loss_path, compact=True, **options
    )
    batch = next(iter(full.get_train_dataloader()))
    assert (batch["labels"] == -100).float().mean() > 0.3  # prompts and padding: rows left out
    want, want_grads = one_batch_loss_and_gradients(full, batch)
    forwards = []
    got, got_grads = one_batch_loss_and_gradients(compact, batch, forwards)
    assert forwards == [(batch["input_ids"].shape[0], 1, compact.model.config.vocab_size)]
    assert want_grads.keys() == got_grads.keys()
    gaps = {
        "loss": abs(got - want),
        "gradients": max((got_grads[k] - want_grads[k]).abs().max().item() for k in want_grads),
    }
    print(f"\ncompact=True vs full, {name} on {loss_path} (max abs):", json.dumps(gaps))
    # The same fp32 sums over fewer rows and in another order: the losses (~14.7) within 4 ulps.
    assert gaps["loss"] <= 4e-6 and gaps["gradients"] <= 1e-6, gaps


def test_compact_refuses_what_it_cannot_score_exactly(tiny_model, tokenizer, spec, tmp_path):
    """A softcapped model's logits are more than its head's output; the chunked path scores a head
    without bias only."""
    from transformers import AutoModelForCausalLM

    from del_core.integrations.setup_checks import compact_problems
    from del_core.losses import build_loss_path

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    compacted = build_loss_path("logits", compact=True)
    assert compact_problems(model, compacted, 1) == compact_problems(model, build_loss_path("logits"), 2) == []
    assert "sequence parallelism (sp_size=2)" in compact_problems(model, compacted, 2)[0]
    model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.config.vocab_size))
    assert compact_problems(model, compacted, 1) == []
    assert "LM head without bias" in compact_problems(model, build_loss_path("chunked", compact=True), 1)[0]
    model.config.final_logit_softcapping = 30.0
    for compact, message in (
        (True, "final_logit_softcapping=30.0 transforms the LM head's output"),
        ("yes", "compact='yes'"),
    ):
        with pytest.raises(UnsupportedSetupError, match=message):
            DELTrainer(
                model=model,
                args=worker.training_arguments(tmp_path, layout("one", 4, 1)),
                train_dataset=spec["rows"][:4],
                data_collator=worker.collate(tokenizer.pad_token_id),
                processing_class=tokenizer,
                compact=compact,
            )


# --- (2) 1 process x accumulation 4 == 2 processes x accumulation 2 == the whole batch ----------
@pytest.mark.launches
def test_accumulation_and_ranks_give_the_whole_batch_loss_and_weights(one_process, two_processes):
    """Per-step losses and final weights of 1x4, 2x2 and 1x1 agree to 1e-5 (DEL, lambda 0.5).

    The two defective normalisations are each caught: per-micro-batch digit normalisation moves
    1x4 away from the whole batch (1x1), and digits counted per rank move 2x2 away from 1x4. (A
    per-micro-batch normaliser alone would NOT separate 1x4 from 2x2: both run the same
    micro-batches; it is the comparison with the whole batch that catches it.)"""
    runs = {**one_process, **two_processes}
    (logs_14, w_14), (logs_22, w_22), (logs_11, w_11) = runs["1x4"], runs["2x2"], runs["1x1"]
    gaps = {
        "loss 1x4-2x2": loss_gap(logs_14, logs_22),
        "loss 1x4-1x1": loss_gap(logs_14, logs_11),
        "weights 1x4-2x2": weight_gap(w_14, w_22),
        "weights 1x4-1x1": weight_gap(w_14, w_11),
    }
    print("\nequality gaps (max abs):", json.dumps(gaps))
    assert all(gap <= TOL for gap in gaps.values()), gaps
    for logs in (logs_14, logs_22):
        assert all(math.isclose(r["loss"], r["ce"] + r["aux"], rel_tol=1e-6) for r in logs)
        assert all(r["aux"] > 0 and 0 <= r["digit_acc"] <= 1 for r in logs)

    naive_logs, naive_w = runs["1x4-per-micro-batch"]
    local_logs, local_w = runs["2x2-rank-local"]
    naive = {
        "per-micro-batch vs 1x1 loss": loss_gap(naive_logs, logs_11),
        "per-micro-batch vs 1x1 weights": weight_gap(naive_w, w_11),
        "rank-local vs 1x4 loss": loss_gap(local_logs, logs_14),
        "rank-local vs 1x4 weights": weight_gap(local_w, w_14),
    }
    print("defective variants (max abs):", json.dumps(naive))
    assert all(gap > 100 * TOL for gap in naive.values()), naive


def test_ntil_accumulation_gives_the_whole_batch_steps(spec):
    """NTIL scales its term by the whole batch's CE / term (the step's pre-pass without
    gradients): 1x4 takes the steps of 1x1 (noise off: the same draws need the same shapes)."""
    options = {"loss": "ntil", "weight": 0.3, "loss_options": {"noise_scale": 0.0}}
    runs = [layout("1x4-ntil", 2, 4, **options), layout("1x1-ntil", 8, 1, **options)]
    for run in runs:
        worker.save(worker.train(spec, run), Path(spec["out"]), run["name"])
    (logs_14, w_14), (logs_11, w_11) = (result(spec, run["name"]) for run in runs)
    gaps = {"loss": loss_gap(logs_14, logs_11), "weights": weight_gap(w_14, w_11)}
    assert all(gap <= TOL for gap in gaps.values()), gaps
    assert all(r["aux"] > 0 for r in logs_14)


# --- (2b) FSDP2 through the Trainer's fsdp= arguments, on the CPU -----------------------------------
@pytest.fixture(scope="module")
def one_process_lora(spec) -> dict:
    """1x4 with LoRA adapters and loss_weight="auto", on both loss paths, in this process."""
    runs = [layout("1x4-lora-auto", 2, 4, lora=True, weight="auto")]
    runs.append(layout("1x4-lora-auto-chunked", 2, 4, lora=True, weight="auto", loss_path="chunked"))
    for run in runs:
        worker.save(worker.train(spec, run), Path(spec["out"]), run["name"])
    return {run["name"]: result(spec, run["name"]) for run in runs}


@pytest.fixture(scope="module")
def one_process_sft(spec) -> dict:
    """DELSFTTrainer (TRL, prompt-completion rows) 1x4 in this process."""
    pytest.importorskip("trl")
    run = layout("1x4-sft", 2, 4, trainer="sft")
    worker.save(worker.train(spec, run), Path(spec["out"]), run["name"])
    return {run["name"]: result(spec, run["name"])}


# Newer losses under the Trainer's FSDP2 (run "fsdp2-2x2-" + key): SMMD, number_level through
# DELSFTTrainer, and NTIL on the chunked path (its step pre-pass runs the FSDP2 model without
# gradients; noise off, since its draws are keyed by the positions of each micro-batch, which 1x4
# and 2x2 split differently). Their 1x4 references: "1x4-" + key.
NEWER_LOSS_RUNS = {
    "smmd": {"loss": "smmd"},
    "sft-number_level": {"loss": "number_level", "trainer": "sft"},
    "ntil-chunked": {"loss": "ntil", "loss_options": {"noise_scale": 0.0}, "loss_path": "chunked"},
}


@pytest.fixture(scope="module")
def one_process_newer_losses(spec) -> dict:
    """The 1x4 runs of :data:`NEWER_LOSS_RUNS`, in this process."""
    pytest.importorskip("trl")
    runs = [layout(f"1x4-{key}", 2, 4, **options) for key, options in NEWER_LOSS_RUNS.items()]
    for run in runs:
        worker.save(worker.train(spec, run), Path(spec["out"]), run["name"])
    return {run["name"]: result(spec, run["name"]) for run in runs}


def fsdp2_reference(run: dict) -> str:
    """The 1-process run an FSDP2 run must equal: 1x4 with the same trainer, loss, loss path, LoRA
    and lambda."""
    if run.get("loss"):
        return "1x4-" + run["name"].removeprefix("fsdp2-2x2-")
    if run.get("trainer") == "sft":
        return "1x4-sft"
    name = "1x4-lora-auto" if run.get("lora") else "1x4"
    return name + ("-chunked" if run.get("loss_path") == "chunked" else "")


def fsdp2_gaps(spec: dict, references: dict, runs: list[dict]) -> dict:
    """Max abs gaps of each FSDP2 run to its 1-process reference (losses, gradient norms, weights)
    after checking that FSDP2 trained it: the Trainer's FSDP flag, accelerate's plugin at version 2
    (with the offload policy asked for) and every parameter a DTensor (a silent fallback to DDP
    fails here). lambda of loss_weight="auto" is the 1-process one to 1e-6 (relative)."""
    gaps = {}
    for run in runs:
        reference = fsdp2_reference(run)
        facts, reference_facts = engines(spec, run["name"]), engines(spec, reference)
        offload = "CPUOffloadPolicy" if run.get("cpu_offload") else "OffloadPolicy"
        assert facts["fsdp"] and not facts["deepspeed"] and facts["fsdp_version"] == 2, facts
        assert facts["offload_policy"] == offload and facts["dtensor_parameters"] == facts["parameters"] > 0, facts
        if run.get("weight") == "auto":
            assert math.isclose(facts["auto_loss_weight"], reference_facts["auto_loss_weight"], rel_tol=1e-6)
        gaps[run["name"]] = run_gaps(result(spec, run["name"]), references[reference])
    print("\nFSDP2 vs 1x4 (max abs):", json.dumps(gaps))
    return gaps


def assert_equal_runs(gaps: dict) -> None:
    """Losses to 1e-5, gradient norms to 1e-4, weights to 1e-5 (1e-4 on the chunked path, see the
    ZeRO test)."""
    for name, gap in gaps.items():
        weight_tol = 1e-4 if "chunked" in name else TOL
        assert gap["loss"] <= TOL and gap["grad_norm"] <= NORM_TOL and gap["weights"] <= weight_tol, (name, gap)


@pytest.mark.launches
def test_fsdp2_two_processes_match_one_process(
    spec, one_process, one_process_lora, one_process_sft, one_process_newer_losses
):
    """2 processes x accumulation 2 under the Trainer's FSDP2 ("full_shard auto_wrap", one unit per
    decoder layer, accelerate's unit of the tied embedding/head and final norm, gloo on the CPU):
    on the logits path, on the chunked path (the LM-head weight read after the forward, whole
    because accelerate keeps the head's unit unsharded until the backward), and with LoRA adapters,
    loss_weight="auto" and the CPU offload policy; DELSFTTrainer (TRL); and the newer losses of
    :data:`NEWER_LOSS_RUNS`. Each equals its 1x4 run in step losses, gradient norms and final
    weights. The chunked loss scored against this rank's shard of the head (the defect FSDP2
    invites) moves the losses."""
    runs = [
        layout("fsdp2-2x2", 2, 2, fsdp=FSDP),
        layout("fsdp2-2x2-chunked", 2, 2, fsdp=FSDP, loss_path="chunked"),
        layout("fsdp2-2x2-offload-lora-auto", 2, 2, fsdp=FSDP, cpu_offload=True, lora=True, weight="auto"),
        layout("fsdp2-2x2-sft", 2, 2, fsdp=FSDP, trainer="sft"),
        layout("fsdp2-2x2-chunked-local-head", 2, 2, fsdp=FSDP, loss_path="chunked", variant="local_head_shard"),
    ]
    runs += [layout(f"fsdp2-2x2-{key}", 2, 2, fsdp=FSDP, **options) for key, options in NEWER_LOSS_RUNS.items()]
    launch(2, spec, runs)
    references = {**one_process, **one_process_lora, **one_process_sft, **one_process_newer_losses}
    gaps = fsdp2_gaps(spec, references, runs)
    defect = gaps.pop("fsdp2-2x2-chunked-local-head")
    assert_equal_runs(gaps)
    assert defect["loss"] > 100 * TOL and defect["weights"] > 100 * TOL, defect


@pytest.mark.launches
def test_fsdp2_four_processes_match_one_process(spec, one_process, one_process_lora):
    """4 processes x accumulation 1 under the Trainer's FSDP2, on the logits path and the chunked
    path, and chunked with LoRA, loss_weight="auto" and the CPU offload policy: each equals its 1x4
    run in step losses, gradient norms and final weights."""
    runs = [
        layout("fsdp2-4x1", 2, 1, fsdp=FSDP),
        layout("fsdp2-4x1-chunked", 2, 1, fsdp=FSDP, loss_path="chunked"),
        layout(
            "fsdp2-4x1-offload-lora-auto-chunked",
            2,
            1,
            fsdp=FSDP,
            cpu_offload=True,
            lora=True,
            weight="auto",
            loss_path="chunked",
        ),
    ]
    launch(4, spec, runs)
    assert_equal_runs(fsdp2_gaps(spec, {**one_process, **one_process_lora}, runs))


# --- (3) DeepSpeed ZeRO-3 (and ZeRO-2) through the Trainer's deepspeed= argument ----------------
@pytest.mark.launches
def test_zero3_and_zero2_two_processes_match_one_process(spec, one_process):
    """2 processes x accumulation 2 under ZeRO-3, ZeRO-2, and ZeRO-3 and ZeRO-2 with the loss chunked
    from the hidden states (under ZeRO-3 the partitioned LM-head weight gathered for the loss's
    forward and backward, its gradient reduce-scattered into ZeRO-3's partitions), and ZeRO-3 with
    ``compact=True`` (the head module on the scored positions alone, against 1x4): finite,
    decreasing losses, the 1-process (1x4) first-step loss, and the same
    losses as 1x4 on the same loss path to 1e-5 and final weights to 1e-5 (1e-4 on the chunked
    path, see below). (The two paths' gradients agree to 1e-5, see the one-batch test; Adam
    amplifies that round-off where gradients are near zero, so weights are compared within a path.)"""
    runs = [layout("zero3", 2, 2, deepspeed=zero_config(3)), layout("zero2", 2, 2, deepspeed=zero_config(2))]
    runs.append(layout("zero2-chunked", 2, 2, deepspeed=zero_config(2), loss_path="chunked"))
    runs.append(layout("zero3-chunked", 2, 2, deepspeed=zero_config(3), loss_path="chunked"))
    # compact=True: the LM-head module, run on the gathered rows after the model's forward, gathers
    # its partitioned weight through its own ZeRO-3 hooks.
    runs.append(layout("zero3-compact", 2, 2, deepspeed=zero_config(3), compact=True))
    launch(2, spec, runs)
    for run in runs:
        reference_logs, reference_w = one_process["1x4-chunked" if run.get("loss_path") else "1x4"]
        logs, weights = result(spec, run["name"])
        losses = [r["loss"] for r in logs]
        assert all(math.isfinite(x) for x in losses) and losses == sorted(losses, reverse=True), losses
        assert abs(losses[0] - one_process["1x4"][0][0]["loss"]) <= TOL
        gaps = {"loss": loss_gap(logs, reference_logs), "weights": weight_gap(weights, reference_w)}
        print(f"\n{run['name']} vs 1x4 (max abs):", json.dumps(gaps))
        # Adam turns round-off in near-zero gradients into updates of up to lr per step; the chunked
        # head's sums make more of it (measured 3.5e-7 to 2.5e-5 across machines, against a total
        # update of up to lr x steps = 3e-3): its weights are compared to 1e-4, the losses to 1e-5.
        weight_tol = 1e-4 if run.get("loss_path") == "chunked" else TOL
        assert gaps["loss"] <= TOL and gaps["weights"] <= weight_tol, gaps


# --- (3b) DeepSpeed Ulysses sequence parallelism through accelerate's ParallelismConfig ----------
def numbers_across_the_cut(spec: dict, tokenizer, micro: int, sp: int) -> int:
    """Numbers of the training rows that straddle a shard cut, batched as the Trainer does."""
    from del_core.integrations import carried_spans
    from del_core.integrations.sequence_parallel import with_whole_sequence_spans
    from del_core.vocab import DigitVocab
    from helpers.sequence_parallel import numbers_across_cuts

    vocab, collate = DigitVocab.from_tokenizer(tokenizer), worker.collate(tokenizer.pad_token_id)
    rows = spec["rows"]
    batches = [collate(rows[i : i + micro]) for i in range(0, len(rows), micro)]
    return sum(
        numbers_across_cuts(carried_spans(with_whole_sequence_spans(b, vocab, sp, tokenizer.pad_token_id)), sp)
        for b in batches
    )


def sequence_parallel_gaps(spec: dict, references: dict, runs: list[dict]) -> dict:
    """Max abs gaps of each run to its 1-process reference: losses, gradient norms and weights."""
    gaps = {}
    for run in runs:
        reference = "1x4-sft" if run.get("trainer") else "1x4-chunked" if run.get("loss_path") else "1x4"
        gaps[run["name"]] = run_gaps(result(spec, run["name"]), references[reference])
    print("\nsequence parallel vs 1x4 (max abs):", json.dumps(gaps))
    return gaps


@pytest.mark.launches
def test_sequence_parallel_two_processes_match_one_process(spec, tokenizer, one_process, one_process_sft):
    """sp_size=2 (2 processes, DeepSpeed Ulysses ZeRO-2, 1 data-parallel replica x accumulation 4):
    each rank runs one half of every sequence, the number spans computed on the whole sequences
    travel with the shards. The same losses as 1x4 to 1e-5, gradient norms to 1e-4 and weights to
    1e-5, with numbers straddling the cut; spans computed on each shard instead (the defect)
    change the losses. DELSFTTrainer (TRL, prompt-completion rows) under sp=2 equals its own 1x4."""
    pytest.importorskip("trl")
    assert numbers_across_the_cut(spec, tokenizer, 2, 2) >= 3
    runs = [
        layout("sp2-zero2", 2, 4, deepspeed=zero_config(2), sp=2),
        layout("sp2-per-shard-spans", 2, 4, deepspeed=zero_config(2), variant="per_shard_spans", sp=2),
        layout("sp2-sft", 2, 4, deepspeed=zero_config(2), trainer="sft", sp=2),
    ]
    launch(2, spec, runs)
    gaps = sequence_parallel_gaps(spec, {**one_process, **one_process_sft}, runs)
    assert engines(spec, "sp2-zero2").items() >= {"fsdp": False, "deepspeed": True, "sp": 2}.items()
    for name in ("sp2-zero2", "sp2-sft"):
        assert gaps[name]["loss"] <= TOL and gaps[name]["grad_norm"] <= NORM_TOL, gaps
        assert gaps[name]["weights"] <= TOL, gaps
    assert gaps["sp2-per-shard-spans"]["loss"] > 100 * TOL, gaps


@pytest.mark.launches
def test_sequence_and_data_parallel_four_processes_match_one_process(spec, one_process):
    """sp_size=2 x 2 data-parallel replicas x accumulation 2 (4 processes) under ZeRO-3 on the
    chunked path: the partitioned LM-head weight gathered for the loss of each shard, the counts
    summed over the sequence-parallel group and the replicas. The same losses as 1x4 chunked to
    1e-5, gradient norms to 1e-4, weights to 1e-4 (chunked, see the ZeRO test)."""
    runs = [layout("sp2-dp2-zero3-chunked", 2, 2, deepspeed=zero_config(3), loss_path="chunked", sp=2)]
    launch(4, spec, runs)
    gaps = sequence_parallel_gaps(spec, one_process, runs)["sp2-dp2-zero3-chunked"]
    assert engines(spec, "sp2-dp2-zero3-chunked").items() >= {"fsdp": False, "deepspeed": True, "sp": 2}.items()
    assert gaps["loss"] <= TOL and gaps["grad_norm"] <= NORM_TOL and gaps["weights"] <= 1e-4, gaps


# --- (4) refusals -------------------------------------------------------------------------------
class HiddenStatesOnly(torch.nn.Module):
    """A causal LM whose forward returns hidden states and no logits (as a fused loss head does)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.config = lm.config

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return {"last_hidden_state": self.lm.model(input_ids=input_ids, attention_mask=attention_mask)[0]}


class LastLogitsOnly(HiddenStatesOnly):
    """A forward that keeps the logits of the last position only (``logits_to_keep=1``)."""

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return {"logits": self.lm(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1).logits}


def trainer_for(tiny_model, tokenizer, rows, tmp_path, wrap=None, args_extra=None, **trainer_extra):
    from transformers import AutoModelForCausalLM, TrainingArguments

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        remove_unused_columns=False,  # the wrappers' forward does not name labels
        **(args_extra or {}),
    )
    return DELTrainer(
        model=wrap(model) if wrap else model,
        args=args,
        train_dataset=rows,
        data_collator=worker.collate(tokenizer.pad_token_id),
        processing_class=tokenizer,
        **trainer_extra,
    )


@pytest.mark.parametrize(
    "args_extra, trainer_extra, named",
    [
        ({"use_liger_kernel": True}, {}, "use_liger_kernel=True"),
        ({"label_smoothing_factor": 0.1}, {}, "label_smoothing_factor=0.1"),
        ({}, {"compute_loss_func": lambda outputs, labels, num_items_in_batch: 0}, "compute_loss_func"),
    ],
    ids=["liger", "label-smoothing", "compute-loss-func"],
)
def test_settings_that_bypass_the_loss_are_refused(
    args_extra, trainer_extra, named, tiny_model, tokenizer, spec, tmp_path
):
    with pytest.raises(UnsupportedSetupError, match=named.replace("=", ".")):
        trainer_for(tiny_model, tokenizer, spec["rows"], tmp_path, args_extra=args_extra, **trainer_extra)


@pytest.mark.parametrize(
    "wrap, message",
    [(HiddenStatesOnly, "returned no logits"), (LastLogitsOnly, "logits_to_keep")],
    ids=["no-logits", "last-only"],
)
def test_a_forward_without_full_logits_is_refused(wrap, message, tiny_model, tokenizer, spec, tmp_path):
    trainer = trainer_for(tiny_model, tokenizer, spec["rows"], tmp_path, wrap=wrap)
    with pytest.raises(UnsupportedSetupError, match=message):
        trainer.train()


def test_loss_path_settings_are_checked():
    assert loss_path_problems("logits", 256) == loss_path_problems("chunked", 256) == []
    assert "loss_path='dense'" in loss_path_problems("dense", 256)[0]
    assert "chunk_size=0" in loss_path_problems("chunked", 0)[0]


def test_a_sharded_head_is_refused_on_the_chunked_path():
    """An LM-head weight that is a DTensor where the chunked loss reads it (FSDP2 resharded the head
    after the forward) is refused, not scored as if it were the whole head. (A stand-in: a
    parameter carrying DTensor's ``placements``; the FSDP2 tests show the Trainer's head whole.)"""
    from torch.distributed.tensor import Shard

    from del_core.integrations.setup_checks import head_weight

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm_head = torch.nn.Linear(4, 10, bias=False)

        def get_output_embeddings(self):
            return self.lm_head

    model = Model()
    assert head_weight(model) is model.lm_head.weight
    model.lm_head.weight.placements = (Shard(0),)
    with pytest.raises(UnsupportedSetupError, match="sharded where the loss reads it.*reshard_after_forward"):
        head_weight(model)


def test_the_0_1_loss_path_spelling_is_refused_naming_the_paths(tiny_model, tokenizer, spec, tmp_path):
    """Release 0.2 removed ``loss_path="hidden"`` (migration: ``"chunked"``)."""
    with pytest.raises(UnsupportedSetupError, match="loss_path='hidden': choose 'logits' .* or 'chunked'"):
        one_batch_trainer(tiny_model, tokenizer, spec["rows"][:4], tmp_path, "del", "hidden")


def test_compute_loss_outside_the_training_loop_is_refused(tiny_model, tokenizer, spec, tmp_path):
    """In training mode the step's global counts must come from get_batch_samples."""
    trainer = trainer_for(tiny_model, tokenizer, spec["rows"], tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))
    with pytest.raises(RuntimeError, match="get_batch_samples"):
        trainer.compute_loss(trainer.model.train(), batch)


@pytest.mark.launches
def test_del_core_imports_without_the_trainer():
    """The losses import neither the Trainer, TRL nor DeepSpeed; the integration imports TRL only
    when DELSFTTrainer is asked for."""
    code = (
        "import sys, del_core, del_core.losses\n"
        "assert not {'transformers.trainer', 'trl', 'deepspeed'} & set(sys.modules), 'losses'\n"
        "import del_core.integrations\n"
        "assert 'trl' not in sys.modules, 'integrations'\n"
        "print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


# --- TRL's SFTTrainer ----------------------------------------------------------------------------
ADDITIONS = [(12, 30), (7, 5), (1234, 8766), (3, 4), (99, 1), (250, 250), (8, 8), (1000, 23)]


def sft_trainer(tiny_model, tokenizer, tmp_path, **config):
    pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    from del_core.integrations import DELSFTTrainer

    rows = [{"prompt": f"What is {a} + {b}?", "completion": f" {a} + {b} = {a + b}."} for a, b in ADDITIONS]
    args = SFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,  # TRL's default is bf16 autocast, also on CPU: the reference runs in fp32
        save_strategy="no",
        disable_tqdm=True,
        train_sampling_strategy="sequential",
        **config,
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    return DELSFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


@pytest.mark.slow
def test_trl_sft_trainer_first_step_is_the_whole_batch_loss(tiny_model, tokenizer, tmp_path):
    """DELSFTTrainer (prompt-completion data: the prompt is masked by TRL) logs as its first-step
    loss the DEL loss of the step's 4 rows in one batch, and trains on."""
    trainer = sft_trainer(tiny_model, tokenizer, tmp_path)
    first = list(trainer.get_train_dataloader())[:2]  # the micro-batches of step 1
    width = max(b["input_ids"].shape[1] for b in first)
    whole = {
        key: torch.cat([torch.nn.functional.pad(b[key], (0, width - b[key].shape[1]), value=pad) for b in first])
        for key, pad in (("input_ids", tokenizer.pad_token_id), ("attention_mask", 0), ("labels", -100))
    }
    with torch.no_grad():
        logits = trainer.model(input_ids=whole["input_ids"], attention_mask=whole["attention_mask"]).logits
    reference = build_loss("del", trainer.del_loss.vocab)(logits[:, :-1], whole["labels"][:, 1:])
    assert int(reference.metrics["n_digits"]) > 0
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    # fp32 sums in another order (two micro-batches vs one batch)
    assert math.isclose(logs[0]["loss"], reference.loss.item(), rel_tol=1e-6), (logs[0], reference.loss)
    assert math.isclose(logs[0]["aux"], reference.aux.item(), rel_tol=1e-6), (logs[0], reference.aux)


def test_trl_loss_types_that_would_be_replaced_are_refused(tiny_model, tokenizer, tmp_path):
    with pytest.raises(UnsupportedSetupError, match="loss_type='dft'"):
        sft_trainer(tiny_model, tokenizer, tmp_path, loss_type="dft")
