"""The trainer's optimizer step under FSDP2 and DDP against DeepSpeed ZeRO-3, on the step profile's workload.

    python tests/bench/engine_step_time.py                        # SmolLM2-135M-Instruct, 1 and 2 processes
    python tests/bench/engine_step_time.py --quick                # the tiny model, ~2 minutes
    python tests/bench/engine_step_time.py --rounds 5 --losses del --nprocs 2 --json out.json

Every run is one fresh process set of ``tests/bench/step_profile.py``'s trainer side (the same
model, rows, global batch, torch AdamW, clipping 1.0, DEL at a fixed lambda; its options apply):
``parallel.zero_stage=3`` under DeepSpeed, ``parallel.engine=fsdp2`` or ``parallel.engine=ddp``. A
round runs the engines of a cell back to back, in an order that reverses between rounds, so a
shared machine's drift falls on all. Per cell: each engine's step time (median over rounds,
min-max), and the paired per-round ratios engine / zero3 of step time and peak memory (the largest
``ru_maxrss`` over the ranks), median and min-max.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_profile  # noqa: E402  (tests/bench is not a package)

ENGINES = {"zero3": (), "fsdp2": ("parallel.engine=fsdp2",), "ddp": ("parallel.engine=ddp",)}
NAMES = {"zero3": "ZeRO-3", "fsdp2": "FSDP2", "ddp": "DDP"}


def one_run(args, work: Path, model: str, rows: str, cell: tuple[str, str, int], round_index: int) -> dict:
    """One run of ``cell`` = (engine, loss, processes): {"engine", "loss", "nproc", "round", "step_s", "peak_gb"}."""
    engine, loss, nproc = cell
    spec = step_profile.RunSpec(
        "trainer", loss, nproc, model, rows, args.cache, args.length, args.batch, args.micro, args.steps,
        3, args.del_weight, False, args.device, ENGINES[engine] + tuple(args.trainer_set),
    )  # fmt: skip
    ranks = step_profile.launch(spec, args, work / f"r{round_index}-{engine}-{loss}-{nproc}")
    result = step_profile.summarise(spec, ranks, round_index, args.warmup)
    print(
        f"round {round_index + 1}/{args.rounds} {engine} {loss} x{nproc}: "
        f"step {result.step_s:.3f} s, peak {result.peak_gb:.2f} GB",
        file=sys.stderr,
        flush=True,
    )
    return dict(engine=engine, loss=loss, nproc=nproc, round=round_index, step_s=result.step_s, peak_gb=result.peak_gb)


def measure(args) -> list[dict]:
    """Every run, in the order run (rewritten to --json after each)."""
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="engine_step_") as tmp:
        work = Path(tmp)
        model, rows = step_profile.prepare(args, work)
        for round_index in range(args.rounds):
            order = list(ENGINES) if round_index % 2 == 0 else list(ENGINES)[::-1]
            for nproc in args.nprocs:
                for loss in args.losses:
                    for engine in order:
                        runs.append(one_run(args, work, model, rows, (engine, loss, nproc), round_index))
                        if args.json:
                            Path(args.json).write_text(json.dumps(runs, indent=1))
    return runs


def _cell(values: list[float], digits: int = 2) -> str:
    return step_profile._spread(step_profile._stats(values), digits)


def table(runs: list[dict]) -> str:
    """The markdown table: per (loss, processes, engine), its step time and peak memory, and the
    ratios to ZeRO-3's paired by round."""
    lines = [
        "| loss | procs | engine | rounds | step s | time ratio to ZeRO-3 | peak GB | memory ratio to ZeRO-3 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for loss, nproc in sorted({(r["loss"], r["nproc"]) for r in runs}, key=lambda c: (c[1], c[0])):
        cell = [r for r in runs if (r["loss"], r["nproc"]) == (loss, nproc)]
        by_engine = {engine: {r["round"]: r for r in cell if r["engine"] == engine} for engine in ENGINES}
        zero3 = by_engine["zero3"]
        for engine, rounds in by_engine.items():
            pairs = [(zero3[i], rounds[i]) for i in sorted(set(zero3) & set(rounds))]
            if not pairs:
                continue
            cells = [
                _cell([b["step_s"] for _, b in pairs], 3),
                _cell([b["step_s"] / a["step_s"] for a, b in pairs]),
                _cell([b["peak_gb"] for _, b in pairs]),
                _cell([b["peak_gb"] / a["peak_gb"] for a, b in pairs]),
            ]
            lines.append(f"| {loss} | {nproc} | {NAMES[engine]} | {len(pairs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    args = step_profile.parse(argv)
    if args.report:
        print(table(json.loads(Path(args.report).read_text())))
        return
    print(table(measure(args)))


if __name__ == "__main__":
    main(sys.argv[1:])
