"""Running recipes/train.py in subprocesses (1 process, or torchrun with N) for the training tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.tiny_models import save_tiny_model
from helpers.torchrun import torchrun_command

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "recipes" / "train.py"


def make_tiny_qwen2(
    directory: Path, tokenizer, kv_heads: int = 2, hidden: int = 32, layers: int = 2, heads: int = 4
) -> Path:
    """A random-initialised Qwen2 (default 2 layers, hidden 32, tied head) with the real Qwen2
    tokenizer (151,936 rows), saved as a Hugging Face directory."""
    shape = {"hidden": hidden, "layers": layers, "heads": heads, "kv_heads": kv_heads}
    return save_tiny_model(
        directory, tokenizer, "qwen2", **shape, tie_word_embeddings=True, bos_token_id=tokenizer.eos_token_id
    )


def make_tiny_llama3(
    directory: Path, tokenizer, kv_heads: int = 2, hidden: int = 32, layers: int = 2, heads: int = 4
) -> Path:
    """A random-initialised Llama-3-shaped model (grouped-query attention, rope theta 500,000,
    untied LM head as in Llama-3-8B; default 2 layers, hidden 32) with a row for every token of
    ``tokenizer`` (the real Llama-3 vocabulary: 128,257 with the added token of the GGUF
    conversion), saved with the tokenizer as a Hugging Face directory."""
    shape = {"hidden": hidden, "layers": layers, "heads": heads, "kv_heads": kv_heads}
    extra = {"rope_theta": 500000.0, "tie_word_embeddings": False, "bos_token_id": tokenizer.bos_token_id}
    return save_tiny_model(directory, tokenizer, "llama", **shape, **extra)


def tiny_run(model: Path, cache_dir: Path, **extra) -> dict:
    """The overrides of a 3-step DEL run of ``model`` on 40 synthetic problems (global batch 8 =
    micro 2 x ...), lr 1e-3 without warm-up, no held-out set, no export; ``extra`` on top."""
    return {
        "model": str(model),
        "data": "synthetic:40",
        "data.eval_size": 0,
        "data.max_length": 128,
        "run.global_batch_size": 8,
        "run.micro_batch_size": 2,
        "run.max_steps": 3,
        "optimizer.lr": 1e-3,
        "optimizer.warmup_ratio": 0.0,
        "run.report_to": "jsonl",
        "model.gradient_checkpointing": "false",
        "run.seed": 3,
        "loss": "del",
        "run.export": "false",
        "model.cache_dir": str(cache_dir),
        **extra,
    }


def run_train(
    nproc: int, overrides: dict, timeout: int = 300, expect_rc: int = 0, recipe=None
) -> subprocess.CompletedProcess:
    """``recipes/train.py [recipe] key=value ...``; one plain process when nproc == 1, else torchrun."""
    args = ([str(recipe)] if recipe else []) + [f"{k}={v}" for k, v in overrides.items() if k != "recipe"]
    command = [sys.executable, str(TRAIN), *args] if nproc == 1 else torchrun_command(nproc, TRAIN, *args)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != expect_rc:
        raise AssertionError(
            f"train.py exited {proc.returncode} (expected {expect_rc})\n--- stdout\n{proc.stdout[-6000:]}"
            f"\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


class LazyRuns:
    """Finished ``recipes/train.py`` runs by name, each run once on first use (the value of a
    module-scoped fixture): ``runs(name, nproc, **overrides)`` is the output folder of the run of
    ``base`` + ``overrides`` in ``nproc`` processes, ``runs.procs(name)`` its CompletedProcess."""

    def __init__(self, base: dict, new_dir):
        self.base = base
        self.new_dir = new_dir  # name -> an empty folder (tmp_path_factory.mktemp)
        self.done: dict[str, tuple[subprocess.CompletedProcess, Path]] = {}

    def __call__(self, name: str, nproc: int, **overrides) -> Path:
        if name not in self.done:
            out = self.new_dir(name)
            self.done[name] = (run_train(nproc, {**self.base, **overrides, "run.output_dir": out}, timeout=600), out)
        return self.done[name][1]

    def procs(self, name: str) -> subprocess.CompletedProcess:
        return self.done[name][0]


def exported_weights(output_dir: Path) -> dict:
    """The tensors of OUTPUT_DIR/final/model.safetensors (a run with ``run.export=true``)."""
    from safetensors.torch import load_file

    return load_file(Path(output_dir) / "final" / "model.safetensors")


def assert_same_run(out: Path, reference: Path, rtol: float, grad_norm: bool = False) -> None:
    """Runs ``out`` and ``reference`` took the same 3 steps: step losses (and with ``grad_norm``
    the gradient norms) to ``rtol``, exported weights of the same (full, unsharded) shapes to fp32
    round-off."""
    import math

    import torch

    got, expected = records(out), records(reference)
    assert [r["step"] for r in got] == [r["step"] for r in expected] == [1, 2, 3]
    keys = ("loss", "grad_norm") if grad_norm else ("loss",)
    for a, b in zip(got, expected):
        for key in keys:
            assert math.isclose(a[key], b[key], rel_tol=rtol), (a["step"], key, a[key], b[key])
    a, b = exported_weights(out), exported_weights(reference)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape, key
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=2e-6)


def records(output_dir: Path, kind: str = "train") -> list[dict]:
    path = Path(output_dir) / "metrics.jsonl"
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == kind]


def train_losses(output_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records(output_dir)}


def heldout_ce(model, overrides: dict) -> float:
    """The teacher-forced CE of ``model`` (a loaded causal LM, or a PEFT model) on the held-out
    examples that a training run with ``overrides`` evaluates, all in one padded batch."""
    import torch

    from del_core.data import collate
    from del_core.evaluation.heldout.teacher_forced import summarise, teacher_forced_sums
    from del_core.tokenizers import load_tokenizer
    from del_core.training import load_train_config
    from del_core.training.trainer import training_data

    tokenizer = load_tokenizer(Path(overrides["model"]))
    config = load_train_config(None, [f"{k}={v}" for k, v in overrides.items()])
    examples = training_data(config, tokenizer, lambda *_: None).eval_examples
    batch = collate(examples, tokenizer.eos_token_id)
    with torch.no_grad():
        logits = model.eval()(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    sums = {k: float(v) for k, v in teacher_forced_sums(logits, batch.targets, None).items()}
    return summarise(sums).ce
