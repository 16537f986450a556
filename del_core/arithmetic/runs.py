"""One benchmark run: a random-initialised model trained with one loss, then evaluated.

A run is a function of its :class:`RunSpec` (loss, lambda, seed) and the benchmark configuration:
the seed fixes the initial weights and the order of the training problems, so every loss sees the
same model and the same batches. Training is the project's plain-PyTorch loop
(:mod:`del_core.training.plain_loop`) rather than the DeepSpeed trainer: a benchmark is a hundred
runs of well under a minute each, on models of a few hundred thousand parameters, where the
engine's start-up alone would dominate.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from del_core import DigitVocab, NumericLoss
from del_core.arithmetic.config import BenchConfig
from del_core.arithmetic.scoring import EvalResult, evaluate
from del_core.arithmetic.tasks import make_split
from del_core.arithmetic.tokenizer import build_tokenizer, encode_examples
from del_core.data.tokenized import Example, TokenBatch, collate
from del_core.training import plain_loop
from del_core.training.plain_loop import PlainLoopConfig, make_loss


@dataclass(frozen=True)
class RunSpec:
    """What distinguishes one run: the loss, its lambda (None: the loss has none), the seed, and
    the phase ("select": scored on the validation split; "test": on the test and OOD splits;
    "untrained": the initial weights of the seed, not trained, scored like "test")."""

    loss: str
    weight: Optional[float]
    seed: int
    phase: str

    @property
    def name(self) -> str:
        weight = "none" if self.weight is None else f"{self.weight:g}"
        return f"{self.phase}/{self.loss}-w{weight}-s{self.seed}"


@dataclass
class RunResult:
    """A finished run: its spec, per-split evaluation, the training curve and its wall time."""

    spec: RunSpec
    evals: dict[str, EvalResult]
    curve: list[dict[str, float]]
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        return {"spec": asdict(self.spec), "evals": {k: asdict(v) for k, v in self.evals.items()}, **self._rest()}

    def _rest(self) -> dict[str, Any]:
        return {"curve": self.curve, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        evals = {k: EvalResult(**v) for k, v in data["evals"].items()}
        return cls(RunSpec(**data["spec"]), evals, data["curve"], data["wall_s"])


def build_model(config: BenchConfig, vocab_size: int, seed: int) -> torch.nn.Module:
    """A random-initialised Llama-architecture causal LM of the configured size (fp32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model_config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden,
        intermediate_size=4 * config.hidden,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    return LlamaForCausalLM(model_config)


@functools.lru_cache(maxsize=2)
def training_examples(train_size: int, digits: int, tasks: tuple[str, ...]) -> list[Example]:
    """The encoded training split, made once per worker process: a run reads its batches from it
    (generating it and tokenising each batch in every run cost ~5 ms of a ~43 ms step and ~1.5 s
    of set-up per run)."""
    problems = make_split("train", train_size, digits, 0, tasks, unique=False)
    return encode_examples(problems, build_tokenizer())


def loop_config(config: BenchConfig) -> PlainLoopConfig:
    """The benchmark's training: AdamW (betas 0.9, 0.98, no weight decay), warm-up cosine to 10% of ``lr``."""
    return PlainLoopConfig(
        steps=config.steps,
        lr=config.lr,
        betas=(0.9, 0.98),
        warmup_steps=config.warmup_steps,
        min_lr_ratio=0.1,
        log_every=config.log_every,
    )


def train(config: BenchConfig, spec: RunSpec, model, loss_fn: NumericLoss, tokenizer) -> list[dict[str, float]]:
    """``config.steps`` steps of the plain loop (:mod:`del_core.training.plain_loop`) on
    ``config.batch_size`` training problems each (the order a function of the seed); returns the
    curve (loss, ce, aux at step 1 and every ``config.log_every`` steps)."""
    examples = training_examples(config.train_size, config.digits, tuple(config.tasks))
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(spec.seed)).tolist()

    def batch_at(step: int) -> TokenBatch:
        start = (step * config.batch_size) % len(order)
        picked = [examples[order[(start + i) % len(order)]] for i in range(config.batch_size)]
        return collate(picked, tokenizer.pad_token_id).to(config.device)

    records = plain_loop.train(model, loss_fn, batch_at, loop_config(config))
    return [{"step": r.step, "loss": r.loss, "ce": r.ce, "aux": r.aux} for r in records]


def eval_splits(spec: RunSpec) -> tuple[str, ...]:
    return ("val",) if spec.phase == "select" else ("test", "ood")


def run_one(config: BenchConfig, spec: RunSpec) -> RunResult:
    """Train and evaluate one run (in this process, ``config.threads`` torch threads)."""
    torch.set_num_threads(config.threads)
    begin = time.perf_counter()
    tokenizer = build_tokenizer()
    vocab = DigitVocab.from_tokenizer(tokenizer)
    model = build_model(config, len(tokenizer), spec.seed).to(config.device)
    if spec.phase == "untrained":
        curve = []
    else:
        curve = train(config, spec, model, make_loss(spec.loss, vocab, spec.weight, model), tokenizer)
    evals = {}
    for split in eval_splits(spec):
        problems = make_split(split, config.eval_size(split), config.digits, 0, config.tasks)
        evals[split] = evaluate(model, tokenizer, vocab, problems, config.eval_batch_size, config.device)
    return RunResult(spec, evals, curve, time.perf_counter() - begin)


def result_path(root: Path, spec: RunSpec) -> Path:
    return root / "runs" / f"{spec.name}.json"


def load_result(root: Path, spec: RunSpec) -> Optional[RunResult]:
    """The finished run's result, or None when it has not finished (resumable runs)."""
    path = result_path(root, spec)
    return RunResult.from_json(json.loads(path.read_text())) if path.is_file() else None


def save_result(root: Path, result: RunResult) -> Path:
    """Write the result atomically (a temporary file renamed into place: never half-written)."""
    path = result_path(root, result.spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".tmp{os.getpid()}")
    staging.write_text(json.dumps(result.to_json(), indent=1))
    os.replace(staging, path)
    return path
