"""The training recipe's optimizer step on SFT rows (mostly prompt) vs ``transformers.Trainer`` and TRL.

    python tests/bench/sft_step.py                      # the CPU tables (SmolLM2-135M-Instruct, prompt
                                                        # shares 0.5 and 0.8, both losses, 5 sides, 3 rounds:
                                                        # 60 runs; rows up to 256 tokens, batch 8 = micro 4 x 2,
                                                        # 1 process of 2 threads)
    python tests/bench/sft_step.py --quick              # a tiny model, one step shape (the smoke test)
    python tests/bench/sft_step.py --report runs.json   # the tables of a --json file (also an interrupted one)
    python tests/bench/sft_step.py --prompt-share 0.8 --losses mle --sides trainer-fast,hf,trl --json out.json

The rows: Alpaca rows whose prompt (a problem statement listing amounts) is about ``--prompt-share``
of the tokens and whose output is a short worked answer (running sums of the amounts), with
lengths drawn between half of ``--length`` and ``--length`` so that a micro-batch holds padding.
The share printed is the one measured on the trainer's tokenisation (the template counts as
prompt). Every side trains the same examples in the same order: the trainer's own tokenisation,
step by step as its plan takes them (:func:`step_profile.hf_dataset`).

The sides, each a fresh process per run (:func:`step_profile.launch`):

* ``trainer``: the recipe's trainer at its defaults (``recipes/train.py``);
* ``trainer-fast``: the same with ``loss.compact=true`` (the LM head and the loss on the scored
  positions alone) and, where the config has it, ``data.padding_free=true`` (a micro-batch's
  examples joined into one row without padding);
* ``hf``: ``transformers.Trainer`` (``DELTrainer`` for del) on the token ids and unshifted labels,
  padded per micro-batch: the reference of every ratio;
* ``trl`` / ``trl-padfree``: TRL's ``SFTTrainer`` (``DELSFTTrainer`` for del) as a user sets it up
  for pre-tokenised data: ``input_ids`` with a ``completion_mask`` and ``completion_only_loss=True``,
  its own collator, ``padding_free`` off / on. TRL documents ``padding_free`` for FlashAttention;
  under sdpa transformers reads the restarts of ``position_ids`` as separate sequences (a
  block-diagonal mask), so it is exact on CPU too; a transformers without that detection skips the
  side with its reason.

Everything else is :mod:`step_profile`'s: the same model, optimizer, DeepSpeed file, normalisation
and step clock; ratios side / hf paired per round (median and min-max), peak memory as
``ru_maxrss``; the side order rotates between rounds. The same work: every side's target tokens
(labels not -100) of each step, counted on the batches it trains, must agree; the table shows
them and the script says where they do not.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_profile import (  # noqa: E402  (tests/bench is not a package)
    RUNNERS,
    SEED,
    RunResult,
    RunSpec,
    SideRun,
    _spread,
    _stats,
    argument_parser,
    finish_args,
    hf_arguments,
    hf_dataset,
    hf_model,
    launch,
    quick_model,
    run_trainer,
    summarise,
    train_hf,
    worker,
)

SIDES = ("trainer", "trainer-fast", "hf", "trl", "trl-padfree")
REFERENCE = "hf"


# --- the rows -----------------------------------------------------------------------------------
INSTRUCTION = "Add the prices in order, cycling, with running totals."


def _worked_answer(prices: list[int], budget: int, count: Any) -> str:
    """Running sums over ``prices`` (cycling) until the answer's tokens (with EOS) reach ``budget``."""
    total, steps = 0, []
    while True:
        price = prices[len(steps) % len(prices)]
        steps.append(f"{total} + {price} = {total + price}.")
        total += price
        answer = " ".join(steps) + f" The total is {total}."
        if count(answer) + 1 >= budget:
            return answer


def sft_row(rng: random.Random, share: float, length: int, tokenizer: Any) -> dict:
    """One Alpaca row of at most ``length`` tokens under the alpaca template, about ``share`` of
    them prompt: a problem listing priced items and a worked answer; the row's size drawn in
    [length / 2, length), the answer's budget its (1 - share)."""
    from del_core.data.tokenized import encode

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def size(row: dict) -> int:
        return len(encode(row, tokenizer, 10 * length).input_ids)

    for _ in range(100):
        total = rng.randrange(length // 2, length)
        answer_budget = max(4, round((1 - share) * total))
        row, prices, sentences = {"instruction": INSTRUCTION, "input": "", "output": ""}, [], []
        while not prices or size(row) < total - answer_budget:
            prices.append(rng.randrange(10, 10**4))
            sentences.append(f"Item {len(prices)} costs {prices[-1]} dollars and weighs {rng.randrange(1, 999)} grams.")
            row["input"] = " ".join(sentences)
        row["output"] = _worked_answer(prices, answer_budget, count)
        if size(row) <= length:
            return row
    raise ValueError(f"no row of at most {length} tokens with a prompt share of {share}: use a larger --length")


@dataclass(frozen=True)
class RowsShape:
    """What the trainer's tokenisation made of the rows of one prompt share."""

    prompt_share: float  # asked for
    ignored_share: float  # tokens whose target is -100, over all tokens
    shortest: int
    longest: int

    def describe(self) -> str:
        return (
            f"prompt share {self.prompt_share}: {self.ignored_share:.0%} of the tokens ignored, "
            f"rows of {self.shortest}-{self.longest} tokens"
        )


def write_sft_rows(path: Path, n_rows: int, share: float, length: int, tokenizer: Any) -> RowsShape:
    """``n_rows`` rows of :func:`sft_row` into ``path`` (JSON lines), and their measured shape."""
    from del_core.data.tokenized import IGNORE_INDEX, encode

    rng = random.Random(f"{SEED}:{share}")
    rows = [sft_row(rng, share, length, tokenizer) for _ in range(n_rows)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    examples = [encode(row, tokenizer, length) for row in rows]
    tokens = sum(len(e.input_ids) for e in examples)
    ignored = sum(t == IGNORE_INDEX for e in examples for t in e.targets)
    lengths = [len(e.input_ids) for e in examples]
    return RowsShape(share, ignored / tokens, min(lengths), max(lengths))


# --- the sides beyond step_profile's --------------------------------------------------------------
def padding_free_config_key() -> Optional[str]:
    """``data.padding_free`` where the trainer's config has it, else None."""
    from del_core.training.config import DataConfig

    return "data.padding_free" if "padding_free" in {f.name for f in dataclasses.fields(DataConfig)} else None


def fast_overrides() -> tuple[str, ...]:
    """The trainer-fast side's overrides beyond the defaults."""
    key = padding_free_config_key()
    return ("loss.compact=true",) + ((f"{key}=true",) if key else ())


def trl_padding_free_refusal() -> Optional[str]:
    """Why TRL's padding-free batches would not be exact here (None: they are). Its collator drops
    the attention mask and restarts ``position_ids`` per example; sdpa and eager attention keep the
    examples apart only where transformers turns those restarts into a block-diagonal mask."""
    from transformers import masking_utils

    if not hasattr(masking_utils, "find_packed_sequence_indices"):
        return "this transformers does not build packed-sequence masks from position_ids for sdpa"
    return None


def run_trl(spec: RunSpec, output_dir: str) -> SideRun:
    """TRL's SFTTrainer (DELSFTTrainer for del) on the trainer's examples, pre-tokenised with a
    completion mask; ``trl-padfree``: padding-free batches. The examples are already cut to
    ``spec.length``, so TRL's own cut (which padding-free refuses) is left off there."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from del_core.data.tokenized import IGNORE_INDEX

    rows, tokenizer, model_dir = hf_dataset(spec, output_dir)
    padding_free = spec.side == "trl-padfree"
    data = Dataset.from_list(
        [{"input_ids": r["input_ids"], "completion_mask": [int(t != IGNORE_INDEX) for t in r["labels"]]} for r in rows]
    )
    config = SFTConfig(
        **hf_arguments(spec, output_dir),
        completion_only_loss=True,
        padding_free=padding_free,
        max_length=None if padding_free else spec.length,
        dataset_num_proc=None,
    )
    common = dict(model=hf_model(spec, model_dir), args=config, train_dataset=data, processing_class=tokenizer)
    if spec.loss == "mle":
        return train_hf(SFTTrainer(**common))
    from del_core.integrations import DELSFTTrainer

    return train_hf(DELSFTTrainer(**common, loss=spec.loss, loss_weight=spec.del_weight))


SFT_RUNNERS = {**RUNNERS, "trainer-fast": run_trainer, "trl": run_trl, "trl-padfree": run_trl}


# --- the driver -----------------------------------------------------------------------------------
@dataclass
class ShareRun:
    """One run's summary with the prompt share of its rows."""

    prompt_share: float
    run: RunResult

    def record(self) -> dict:
        return {"prompt_share": self.prompt_share, **self.run.__dict__}

    @classmethod
    def from_record(cls, record: dict) -> ShareRun:
        fields = dict(record)
        return cls(fields.pop("prompt_share"), RunResult(**fields))


def cell_rows(runs: list[ShareRun], share: float, loss: str) -> list[dict]:
    """Per side of one (prompt share, loss) cell: step time, peak memory and target tokens over
    rounds, and the per-round ratios side / hf (only the rounds in which both ran)."""
    cell = [r.run for r in runs if r.prompt_share == share and r.run.loss == loss]
    reference = {r.round: r for r in cell if r.side == REFERENCE}
    rows = []
    for side in [s for s in SIDES if any(r.side == s for r in cell)]:
        mine = {r.round: r for r in cell if r.side == side}
        pairs = [(mine[i], reference[i]) for i in sorted(set(mine) & set(reference))]
        if not pairs:
            continue
        rows.append(
            {
                "side": side,
                "rounds": len(pairs),
                "step_s": _stats([a.step_s for a, _ in pairs]),
                "time_ratio": _stats([a.step_s / b.step_s for a, b in pairs]),
                "cpu_time_ratio": _stats([a.cpu_s / b.cpu_s for a, b in pairs]),
                "peak_gb": _stats([a.peak_gb for a, _ in pairs]),
                "memory_ratio": _stats([a.peak_gb / b.peak_gb for a, b in pairs]),
                "step_targets": pairs[0][0].step_targets,
            }
        )
    return rows


def work_differences(runs: list[ShareRun]) -> list[str]:
    """The (round, share, loss) cells whose sides did not train the same target tokens per step."""
    lines = []
    for key in sorted({(r.run.round, r.prompt_share, r.run.loss) for r in runs}):
        cell = {r.run.side: r.run.step_targets for r in runs if (r.run.round, r.prompt_share, r.run.loss) == key}
        if len({tuple(targets) for targets in cell.values()}) > 1:
            lines.append(f"round {key[0] + 1}, prompt share {key[1]}, {key[2]}: " + json.dumps(cell))
    return lines


def tables(runs: list[ShareRun], shapes: dict[float, str]) -> str:
    """A markdown table per (loss, prompt share)."""
    lines = []
    for loss in sorted({r.run.loss for r in runs}, key=lambda name: (name != "mle", name)):
        for share in sorted({r.prompt_share for r in runs}):
            lines += [f"{loss}, {shapes.get(share, f'prompt share {share}')}:", ""]
            lines.append(
                "| side | step s | time ratio side/hf | cpu-time ratio side/hf | peak GB | mem ratio side/hf "
                "| target tokens per step |"
            )
            lines.append("|---|---|---|---|---|---|---|")
            for row in cell_rows(runs, share, loss):
                lines.append(
                    f"| {row['side']} | {_spread(row['step_s'], 3)} | {_spread(row['time_ratio'])} "
                    f"| {_spread(row['cpu_time_ratio'])} | {_spread(row['peak_gb'])} | {_spread(row['memory_ratio'])} "
                    f"| {', '.join(str(n) for n in row['step_targets'])} |"
                )
            lines.append("")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--prompt-share", default="0.5,0.8", help="shares of the tokens that are prompt (ignored)")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"a subset of {','.join(SIDES)}; hf always runs")
    parser.set_defaults(nprocs="1", threads=2, length=256, batch=8, micro=4)
    args = finish_args(parser, parser.parse_args(argv))
    args.phases = False  # step_profile.py gives the trainer's phase split
    if len(args.nprocs) != 1:
        parser.error(f"--nprocs: one process count per table, got {args.nprocs}")
    args.prompt_share = [float(s) for s in args.prompt_share.split(",")]
    if any(not 0 < s < 1 for s in args.prompt_share):
        parser.error(f"--prompt-share: each share lies strictly between 0 and 1, got {args.prompt_share}")
    sides = args.sides.split(",")
    unknown = sorted(set(sides) - set(SIDES))
    if unknown:
        parser.error(f"--sides: unknown {','.join(unknown)}; the sides are {','.join(SIDES)}")
    args.sides = [s for s in SIDES if s in sides or s == REFERENCE]
    if args.quick:
        args.length = 256  # room for the template and a prompt of either share
    return args


def chosen_sides(args: argparse.Namespace) -> list[str]:
    """``args.sides`` less those that cannot run here (each with its reason printed)."""
    sides = list(args.sides)
    if "trl-padfree" in sides:
        refusal = trl_padding_free_refusal()
        if refusal:
            print(f"# skipping trl-padfree: {refusal}", file=sys.stderr)
            sides.remove("trl-padfree")
    if "trainer-fast" in sides and padding_free_config_key() is None:
        print("# trainer-fast: loss.compact=true only (this trainer has no data.padding_free)", file=sys.stderr)
    return sides


def prepare(args: argparse.Namespace, work: Path) -> tuple[str, dict[float, str], dict[float, RowsShape]]:
    """(model source, rows file per share, rows shape per share): with --quick the tiny model saved."""
    from del_core.models import resolve_model
    from del_core.tokenizers import load_tokenizer

    cache = Path(args.cache)
    model = args.model
    if args.quick and model == "smollm2":
        model = str(quick_model(work / "tiny-model", resolve_model("smollm2", cache)))
    tokenizer = load_tokenizer(resolve_model(model, cache), cache / "tokenizers")
    files, shapes = {}, {}
    for share in args.prompt_share:
        path = work / f"rows-{share}.jsonl"
        shapes[share] = write_sft_rows(path, max(64, args.batch * args.steps), share, args.length, tokenizer)
        files[share] = str(path)
    return model, files, shapes


def one_run(args: argparse.Namespace, work: Path, spec: RunSpec, share: float, round_index: int) -> ShareRun:
    """Launch one run of this script's worker, summarise it and print its progress line."""
    run_dir = work / f"r{round_index}-{share}-{spec.side}-{spec.loss}"
    result = summarise(spec, launch(spec, args, run_dir, Path(__file__)), round_index, args.warmup)
    print(
        f"round {round_index + 1}/{args.rounds} share {share} {spec.side:12s} {spec.loss}: step {result.step_s:.3f} s "
        f"(cpu {result.cpu_s:.3f} s), peak {result.peak_gb:.2f} GB, targets {result.step_targets}, "
        f"load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
        flush=True,
    )
    return ShareRun(share, result)


def measure(args: argparse.Namespace) -> tuple[list[ShareRun], dict[float, str]]:
    """Every run of the rounds in the order run, and each share's rows described."""
    runs: list[ShareRun] = []
    sides = chosen_sides(args)
    with tempfile.TemporaryDirectory(prefix="sft_step_") as tmp:
        work = Path(tmp)
        model, files, shapes = prepare(args, work)
        print(
            f"# sft_step: {'quick (tiny model)' if args.quick else model}, ZeRO-{args.zero}, "
            f"{'bf16 on cuda' if args.device == 'cuda' else 'fp32 on CPU'}, rows up to {args.length} tokens x global "
            f"batch {args.batch} (micro {args.micro}) x {args.nprocs[0]} process(es), {args.steps} steps "
            f"({args.warmup} warm-up), {args.rounds} rounds, {args.threads} thread(s) per rank; "
            + "; ".join(shape.describe() for shape in shapes.values()),
            file=sys.stderr,
            flush=True,
        )
        for round_index in range(args.rounds):
            order = sides[round_index % len(sides) :] + sides[: round_index % len(sides)]
            for share in args.prompt_share:
                for loss in args.losses:
                    for side in order:
                        extra = fast_overrides() if side == "trainer-fast" else ()
                        spec = RunSpec(
                            side, loss, args.nprocs[0], model, files[share], args.cache, args.length, args.batch,
                            args.micro, args.steps, args.zero, args.del_weight, False, args.device,
                            (*args.trainer_set, *extra),
                        )  # fmt: skip
                        runs.append(one_run(args, work, spec, share, round_index))
                        if args.json:  # after every run: an interrupted table keeps its finished runs
                            record = {"shapes": {s: shape.describe() for s, shape in shapes.items()}}
                            record["runs"] = [r.record() for r in runs]
                            Path(args.json).write_text(json.dumps(record, indent=1))
    return runs, {share: shape.describe() for share, shape in shapes.items()}


def report(runs: list[ShareRun], shapes: dict[float, str]) -> None:
    """The tables and the same-work verdict on stdout."""
    print(tables(runs, shapes))
    differences = work_differences(runs)
    if differences:
        print("The sides did NOT train the same target tokens per step:")
        for line in differences:
            print("  " + line)
    else:
        print("Same work: in every (round, prompt share, loss) every side trained the same target tokens per step.")
    for run in runs:
        if not all(math.isfinite(v) for v in (run.run.step_s, run.run.cpu_s, run.run.peak_gb)):
            print(f"Not finite: {run.record()}")


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.worker:
        worker(RunSpec(**json.loads(args.worker)), Path(args.out), SFT_RUNNERS)
        return
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        shapes = {float(share): text for share, text in saved["shapes"].items()}
        report([ShareRun.from_record(r) for r in saved["runs"]], shapes)
        return
    started = time.time()
    runs, shapes = measure(args)
    report(runs, shapes)
    print(f"\n({time.time() - started:.0f} s in all; command: python tests/bench/sft_step.py {' '.join(argv)})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
