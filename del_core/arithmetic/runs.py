"""One benchmark run: a random-initialised model trained with one loss, then evaluated.

A run is a function of its :class:`RunSpec` (loss, lambda, seed) and the benchmark configuration:
the seed fixes the initial weights and the order of the training problems, so every loss sees the
same model and the same batches. The loop is a plain single-process torch loop rather than the
DeepSpeed trainer: a benchmark is a hundred runs of well under a minute each, on models of a few
hundred thousand parameters, where the engine's start-up alone would dominate.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import torch

from del_core import DigitVocab, NumericLoss, build_loss
from del_core.arithmetic.scoring import EvalResult, evaluate
from del_core.arithmetic.tasks import Problem, make_split
from del_core.arithmetic.tokenizer import build_tokenizer
from del_core.data.tokenized import Example, collate
from del_core.experiments.grid import Unit
from del_core.experiments.numeric_bench.config import NumericBenchConfig as BenchConfig
from del_core.experiments.output_root import read_marker, write_marker
from del_core.experiments.results import UnitResult
from del_core.spans import IGNORE_INDEX

# A run is one unit of the experiments core (loss, lambda, seed, phase: "select" scored on the
# validation split; "test" on the test and OOD splits; "untrained" the seed's initial weights, scored
# like "test"), and its result the core's one unit record, with one EvalResult per split.
RunSpec = Unit
RunResult = UnitResult


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


def encode_examples(problems: Sequence[Problem], tokenizer: Any) -> list[Example]:
    """One :class:`Example` per problem: prompt + answer + EOS; position t predicts token t + 1
    where that token is in the answer or EOS, else -100. Tokenised in two batched calls."""
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    answers = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
    examples = []
    for prompt, answer in zip(prompts, answers):
        answer = [*answer, tokenizer.eos_token_id]
        examples.append(Example(prompt + answer, [IGNORE_INDEX] * (len(prompt) - 1) + answer + [IGNORE_INDEX]))
    return examples


def encode_batch(problems: Sequence[Problem], tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids [B, T], aligned targets [B, T]) of :func:`encode_examples`, right-padded by the
    project's :func:`del_core.data.tokenized.collate`."""
    batch = collate(encode_examples(problems, tokenizer), tokenizer.pad_token_id)
    return batch.input_ids, batch.targets


@functools.lru_cache(maxsize=2)
def training_examples(train_size: int, digits: int, tasks: tuple[str, ...]) -> list[Example]:
    """The encoded training split, made once per worker process: a run reads its batches from it
    (generating it and tokenising each batch in every run cost ~5 ms of a ~43 ms step and ~1.5 s
    of set-up per run)."""
    problems = make_split("train", train_size, digits, 0, tasks, unique=False)
    return encode_examples(problems, build_tokenizer())


def make_loss(spec: RunSpec, vocab: DigitVocab, model: torch.nn.Module) -> NumericLoss:
    """The run's loss; EMO's cost embedding is the LM head at initialisation (frozen copy)."""
    options = {}
    if spec.loss == "emo":
        options["cost_embedding"] = model.get_output_embeddings().weight.detach().clone()
    return build_loss(spec.loss, vocab, spec.weight, **options)


def learning_rate(config: BenchConfig, step: int) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to 10% of ``lr`` at ``steps``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(config: BenchConfig, spec: RunSpec, model, loss_fn: NumericLoss, tokenizer) -> list[dict[str, float]]:
    """``config.steps`` AdamW steps of ``config.batch_size`` training problems (the order a function
    of the seed); returns the curve (loss, ce, aux at step 1 and every ``config.log_every`` steps)."""
    examples = training_examples(config.train_size, config.digits, tuple(config.tasks))
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(spec.seed)).tolist()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0, betas=(0.9, 0.98))
    model.train()
    curve = []
    for step in range(config.steps):
        start = (step * config.batch_size) % len(order)
        batch = collate(
            [examples[order[(start + i) % len(order)]] for i in range(config.batch_size)], tokenizer.pad_token_id
        )
        input_ids, targets = batch.input_ids.to(config.device), batch.targets.to(config.device)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, step)
        out = loss_fn(model(input_ids=input_ids, attention_mask=input_ids != tokenizer.pad_token_id).logits, targets)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        # Step 1 too: the ratio aux / CE at the start is what a lambda rule for new models reads.
        if step == 0 or (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            curve.append({"step": step + 1, "loss": out.loss.item(), "ce": out.ce.item(), "aux": out.aux.item()})
    return curve


def eval_splits(spec: RunSpec) -> tuple[str, ...]:
    return ("val",) if spec.phase == "select" else ("test", "ood")


def run_one(config: BenchConfig, spec: RunSpec) -> RunResult:
    """Train and evaluate one run (in this process, ``config.threads`` torch threads)."""
    torch.set_num_threads(config.threads)
    begin = time.perf_counter()
    tokenizer = build_tokenizer()
    vocab = DigitVocab.from_tokenizer(tokenizer)
    model = build_model(config, len(tokenizer), spec.seed).to(config.device)
    curve = [] if spec.phase == "untrained" else train(config, spec, model, make_loss(spec, vocab, model), tokenizer)
    evals = {}
    for split in eval_splits(spec):
        problems = make_split(split, config.eval_size(split), config.digits, 0, config.tasks)
        evals[split] = evaluate(model, tokenizer, vocab, problems, config.eval_batch_size, config.device)
    return RunResult(spec, evals, curve, time.perf_counter() - begin)


def result_path(root: Path, spec: RunSpec) -> Path:
    return root / "runs" / f"{spec.name}.json"


def load_result(root: Path, spec: RunSpec) -> Optional[RunResult]:
    """The finished run's result, or None when it has not finished or its file is torn (it runs again)."""
    data = read_marker(result_path(root, spec))
    return None if data is None else RunResult.from_json(data, EvalResult)


def save_result(root: Path, result: RunResult) -> Path:
    """Write the result atomically (the run's done marker: never half-written)."""
    return write_marker(result_path(root, result.spec), result.to_json())
