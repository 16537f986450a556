"""One benchmark run: a random-initialised model trained with one loss, then evaluated.

A run is one :class:`~del_core.experiments.grid.Unit` of the experiments core (loss, lambda, seed,
phase: "select" scored on the validation split; "test" on the test and OOD splits; "untrained" the
seed's initial weights, scored like "test"), and its result the core's one unit record
(:class:`~del_core.experiments.results.UnitResult`, with one EvalResult per split). A run is a
function of its unit and the benchmark configuration: the seed fixes the initial weights and the
order of the training problems, so every loss sees the same model and the same batches. Training
is the project's plain-PyTorch loop (:mod:`del_core.plain_loop`) rather than the DeepSpeed
trainer: a benchmark is a hundred runs of well under a minute each, on models of a few hundred
thousand parameters, where the engine's start-up alone would dominate.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Optional

import torch

from del_core import DigitVocab, NumericLoss, plain_loop
from del_core.data.tokenized import Example, TokenBatch, collate
from del_core.experiments.grid import Unit
from del_core.experiments.numeric_bench.char_tokenizer import build_tokenizer, encode_examples
from del_core.experiments.numeric_bench.config import NumericBenchConfig
from del_core.experiments.numeric_bench.score_unit import EvalResult, evaluate
from del_core.experiments.numeric_bench.tasks import make_split
from del_core.experiments.output_root import read_marker, write_marker
from del_core.experiments.results import UnitResult
from del_core.plain_loop import PlainLoopConfig, make_loss


def build_model(config: NumericBenchConfig, vocab_size: int, seed: int) -> torch.nn.Module:
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


def loop_config(config: NumericBenchConfig) -> PlainLoopConfig:
    """The benchmark's training: AdamW (betas 0.9, 0.98, no weight decay), warm-up cosine to 10% of ``lr``."""
    return PlainLoopConfig(
        steps=config.steps,
        lr=config.lr,
        betas=(0.9, 0.98),
        warmup_steps=config.warmup_steps,
        min_lr_ratio=0.1,
        log_every=config.log_every,
    )


def train(config: NumericBenchConfig, spec: Unit, model, loss_fn: NumericLoss, tokenizer) -> list[dict[str, float]]:
    """``config.steps`` steps of the plain loop (:mod:`del_core.plain_loop`) on
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


def eval_splits(spec: Unit) -> tuple[str, ...]:
    return ("val",) if spec.phase == "select" else ("test", "ood")


def run_one(config: NumericBenchConfig, spec: Unit) -> UnitResult:
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
    return UnitResult(spec, evals, curve, time.perf_counter() - begin)


def result_path(root: Path, spec: Unit) -> Path:
    return root / "runs" / f"{spec.name}.json"


def load_result(root: Path, spec: Unit) -> Optional[UnitResult]:
    """The finished run's result, or None when it has not finished or its file is torn (it runs again)."""
    data = read_marker(result_path(root, spec))
    return None if data is None else UnitResult.from_json(data, EvalResult)


def save_result(root: Path, result: UnitResult) -> Path:
    """Write the result atomically (the run's done marker: never half-written)."""
    return write_marker(result_path(root, result.spec), result.to_json())
