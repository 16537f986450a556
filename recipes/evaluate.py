"""Zero-shot evaluation on the seven math benchmarks of the DEL paper.

    python recipes/evaluate.py MODEL --data-dir DIR [--benchmarks gsm8k,svamp|all] [--limit N]
                               [--backend auto|vllm|hf] [--tp N] [--batch-size N] [--max-new-tokens N]
    python recipes/evaluate.py --score-only PRED.jsonl --data-dir DIR --output OUT.jsonl

MODEL: an HF directory, a training output directory (its final/), a .gguf file, smollm2 or a hub
name. DIR (default $DEL_BENCHMARK_DIR) holds gsm8k/, math/, svamp/, simuleq/, aqua/, sat/,
mmlu_mathematics/. Writes OUTPUT_DIR/predictions.jsonl (one row per question: prompt, output,
program, answer, gold, correct) and OUTPUT_DIR/summary.json (accuracy per benchmark, mACC, MAE,
log-MAE, per-place digit accuracy), and prints the table. Protocol: recipes/evaluation/protocol.py.

--score-only re-scores saved outputs without a model: each input row is {"benchmark": ..., "index":
i, "output": text} (i = the question's position in the benchmark file; optional "mode": auto | pot
| cot); each output row adds answer, correct, gold and unanswered; the table goes to stderr and the
summary to stdout as JSON on its last line.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes.evaluation.benchmarks import (BENCHMARKS, BenchmarkError, data_dir_from, load_benchmark,
                                           parse_benchmark_list)
from recipes.evaluation.report import format_table, write_json, write_jsonl
from recipes.evaluation.sandbox import SandboxLimits
from recipes.evaluation.scoring import summarize


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="HF directory, training output directory, .gguf, smollm2 or hub name")
    parser.add_argument("--data-dir", help="benchmark directory (default: $DEL_BENCHMARK_DIR)")
    parser.add_argument("--benchmarks", default="all", help=f"comma list of {','.join(BENCHMARKS)}, or all")
    parser.add_argument("--limit", type=int, help="the first N questions of each benchmark")
    parser.add_argument("--output-dir", help="default: OUTPUT_DIR/eval for a training output, else eval/<model name>")
    parser.add_argument("--backend", default="auto", choices=("auto", "vllm", "hf"))
    parser.add_argument("--tp", type=int, default=1, help="vLLM tensor-parallel size")
    parser.add_argument("--batch-size", type=int, default=8, help="HF generate batch size")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU), bfloat16, float16, float32")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--workers", type=int, default=4, help="programs run at once in the sandbox")
    parser.add_argument("--program-seconds", type=float, default=10.0, help="wall-clock limit of one program")
    parser.add_argument("--program-cpu-seconds", type=int, default=5, help="CPU-time limit of one program")
    parser.add_argument("--score-only", metavar="PRED.jsonl", help="re-score saved outputs without a model")
    parser.add_argument("--output", metavar="OUT.jsonl", help="scored rows of --score-only")
    return parser


def default_output_dir(model: str, resolved: str) -> Path:
    path = Path(resolved)
    if path.name == "final" and path.is_dir():
        return path.parent / "eval"
    return Path("eval") / re.sub(r"[^\w.-]+", "_", Path(model).name or model)


def read_predictions(path: Path) -> list[dict]:
    """Rows of a --score-only input; a bad row stops with its line and field."""
    if not path.is_file():
        raise BenchmarkError(f"--score-only file not found: {path}")
    rows = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {line_no}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BenchmarkError(f"{where}: not valid JSON ({err})") from None
        for key, kind in (("benchmark", str), ("index", int), ("output", str)):
            if not isinstance(row.get(key), kind) or isinstance(row.get(key), bool):
                raise BenchmarkError(f"{where}: field {key!r} missing or not {kind.__name__}")
        if row["benchmark"] not in BENCHMARKS:
            raise BenchmarkError(f"{where}: field 'benchmark' is {row['benchmark']!r}, not one of {', '.join(BENCHMARKS)}")
        if row.get("mode", "auto") not in ("auto", "pot", "cot"):
            raise BenchmarkError(f"{where}: field 'mode' is {row['mode']!r}, not auto, pot or cot")
        row["_where"] = where
        rows.append(row)
    return rows


def score_only(args, limits: SandboxLimits) -> int:
    from recipes.evaluation.protocol import score_outputs

    if not args.output:
        raise BenchmarkError("--score-only needs --output OUT.jsonl")
    data_dir = data_dir_from(args.data_dir)
    predictions = read_predictions(Path(args.score_only))
    records = {name: load_benchmark(name, data_dir) for name in sorted({p["benchmark"] for p in predictions})}
    items = []
    for p in predictions:
        questions = records[p["benchmark"]]
        if not 0 <= p["index"] < len(questions):
            raise BenchmarkError(f"{p['_where']}: field 'index' is {p['index']}, but {p['benchmark']} has "
                                 f"{len(questions)} questions (0..{len(questions) - 1})")
        items.append((questions[p["index"]], p["output"], p.get("mode", "auto")))
    scored = score_outputs(items, limits, args.workers)
    out_rows = []
    for p, row in zip(predictions, scored):
        extra = {k: row[k] for k in ("answer", "correct", "gold", "unanswered")}
        extra["program_status"] = row["sandbox"]["status"] if row["sandbox"] else None
        out_rows.append({**{k: v for k, v in p.items() if k != "_where"}, **extra})
    write_jsonl(Path(args.output), out_rows)
    summary = summarize(scored)
    print(format_table(summary), file=sys.stderr)
    print(json.dumps(summary))
    return 0


def evaluate_model(args, limits: SandboxLimits) -> int:
    from recipes.evaluation.generation import make_generator, resolve_model
    from recipes.evaluation.protocol import evaluate

    if not args.model:
        raise BenchmarkError("give MODEL (or --score-only PRED.jsonl)")
    data_dir = data_dir_from(args.data_dir)
    names = parse_benchmark_list(args.benchmarks)
    records = [r for name in names for r in load_benchmark(name, data_dir, args.limit)]
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    resolved = resolve_model(args.model)
    output_dir = Path(args.output_dir) if args.output_dir else default_output_dir(args.model, resolved)
    started = time.time()
    generator = make_generator(resolved, args.backend, tp=args.tp, batch_size=args.batch_size,
                               max_new_tokens=args.max_new_tokens, dtype=args.dtype)
    print(f"[evaluate] {resolved} ({generator.name}), {len(records)} questions of {', '.join(names)}", file=sys.stderr)
    rows = evaluate(records, generator, limits, args.workers)
    summary = summarize(rows)
    summary["config"] = {"model": args.model, "resolved_model": resolved, "backend": generator.name, "tp": args.tp,
                         "benchmarks": list(names), "limit": args.limit, "max_new_tokens": args.max_new_tokens,
                         "batch_size": args.batch_size, "data_dir": str(data_dir),
                         "seconds": round(time.time() - started, 1)}
    write_jsonl(output_dir / "predictions.jsonl", rows)
    write_json(output_dir / "summary.json", summary)
    print(format_table(summary))
    print(f"[evaluate] wrote {output_dir / 'predictions.jsonl'} and {output_dir / 'summary.json'}")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    limits = SandboxLimits(wall_seconds=args.program_seconds, cpu_seconds=args.program_cpu_seconds)
    try:
        return score_only(args, limits) if args.score_only else evaluate_model(args, limits)
    except BenchmarkError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
