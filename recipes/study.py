"""Does DEL help? Fine-tune one starting model with each loss under the same budget, data, seeds and
hyper-parameters, evaluate every run the same way, and write a results table and a plot.

    python recipes/study.py recipes/configs/study-cpu.yaml                 # ~50 min on 2 CPU cores
    python recipes/study.py recipes/configs/study-gpu.yaml --benchmark-dir DIR
    python recipes/study.py CONFIG --losses mle,del --seeds 0 --max_steps 2 --output_root runs/try
    python recipes/study.py CONFIG --report-only                          # tables and plot from what exists

Overrides are ``--key value`` (or ``--key=value``, dashes read as underscores): a key of
:class:`StudyConfig` sets the study, a key of ``recipes/config.py`` (``max_steps``, ``lr``, ...) is
passed to every training run. Values are parsed as YAML; lists may be written ``a,b,c``.

Steps (in this order; each is skipped when its outputs exist, so an interrupted study continues):
  data       OUTPUT_ROOT/data/{train,heldout}.jsonl from ``recipes/study_data.py`` (held-out: the
             same generator, another seed, no shared question)
  reference  the starting model evaluated like the runs: OUTPUT_ROOT/pretrained/{heldout,benchmarks}/
  runs       for each seed, for each loss: ``recipes/train.py`` in a subprocess into
             OUTPUT_ROOT/<loss>/seed<k>/ (done when metrics.jsonl has its "final" record), then
             heldout/ (greedy answers to held-out problems) and benchmarks/ (``recipes/evaluate.py``
             on the first ``benchmark_limit`` GSM8K/SVAMP questions; skipped with a message when
             there is no benchmark directory)
  report     OUTPUT_ROOT/results.json, results.md, results.png (``recipes/study_report.py``)

Metrics of a run (``run_metrics``):
  exact_acc       share of held-out problems whose greedy answer (the number after "The answer is",
                  else the last number written; ``recipes/evaluation/extract.py``) equals the gold
                  (``recipes/evaluation/numbers.numbers_match``)
  mae, log_mae    over the held-out problems that got a number: mean |p - g| and mean
                  |sign(p) ln(1+|p|) - sign(g) ln(1+|g|)| (``recipes/evaluation/scoring.py``)
  answered        share of held-out problems whose answer holds a number
  tf_number_acc, tf_digit_acc, tf_digit_entropy, tf_ce
                  teacher-forced on the held-out split by train.py after training (its last "eval"
                  record; ``recipes/heldout.py``): digit entropy is the mean entropy (nats) of the
                  ten-digit distribution at digit positions
  <benchmark>_acc, bench_macc, bench_log_mae
                  ``recipes/evaluate.py`` summary (accuracy per benchmark, their mean, pooled log-MAE)
  train_time_s    train.py's training-loop time
Per loss: mean and sample standard deviation (n - 1) over seeds (``aggregate``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from recipes.config import ConfigError, TrainConfig, load_config, parse_overrides, read_yaml_mapping

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "recipes" / "train.py"
EVALUATE = REPO / "recipes" / "evaluate.py"
STUDY_LOSSES = ("mle", "mixce", "emo", "ntl_was", "dist2", "del")
# Training keys the study sets itself, per run; a config may not set them under ``train``.
STUDY_OWNED_TRAIN_KEYS = ("model", "loss", "loss_weight", "seed", "data", "eval_data", "eval_size", "eval_generate",
                          "output_dir", "export", "resume")
# Study keys that may change between invocations on the same OUTPUT_ROOT (they do not change results).
RESUMABLE_KEYS = ("losses", "seeds", "output_root", "threads", "benchmark_dir", "eval_batch_size", "keep_weights")


class StudyError(RuntimeError):
    """A bad study configuration or a failed step; the message says which and where."""


@dataclass
class StudyConfig:
    """Every key of a study YAML file. Sizes are in problems (rows) and tokens."""

    model: str = "smollm2"  # the starting model of every run (train.py's ``model``)
    losses: tuple = STUDY_LOSSES
    seeds: tuple = (0, 1, 2)
    output_root: str = "runs/study"
    loss_weights: dict = field(default_factory=dict)  # loss -> lambda; absent = the loss's default
    # data (recipes/study_data.py)
    data_seed: int = 1234
    train_size: int = 400
    heldout_size: int = 48  # held-out rows evaluated teacher-forced by train.py
    heldout_generate: int = 16  # held-out rows answered by greedy generation (of the styles below)
    generate_styles: tuple = ("steps",)  # solution styles of the generated-answer rows: steps, program
    program_share: float = 0.5  # share of rows written as programs
    heldout_max_new_tokens: int = 40
    # benchmarks (recipes/evaluate.py)
    benchmarks: tuple = ("gsm8k", "svamp")  # empty: none
    benchmark_limit: int = 4  # the first N questions of each benchmark
    benchmark_max_new_tokens: int = 128
    benchmark_dir: Optional[str] = None  # default $DEL_BENCHMARK_DIR
    eval_backend: str = "hf"  # hf, vllm or auto (recipes/evaluate.py --backend)
    eval_batch_size: int = 8
    # machine
    threads: int = 2  # OMP threads of training and torch threads of evaluation (CPU)
    keep_weights: bool = True  # False: delete OUTPUT_DIR/final/*.safetensors once a run is evaluated
    train: dict = field(default_factory=dict)  # train.py keys shared by every run (recipes/config.py)

    def __post_init__(self) -> None:
        self.losses, self.seeds = tuple(self.losses), tuple(int(s) for s in self.seeds)
        self.generate_styles, self.benchmarks = tuple(self.generate_styles), tuple(self.benchmarks)


# --- configuration --------------------------------------------------------------------------
def _as_list(value: Any) -> list:
    """A YAML list, a comma list "a,b" or one scalar, as a list; None and "" and "none" -> []."""
    if value is None or value == "" or value == "none":
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [value]


def _coerce(name: str, value: Any, where: str) -> Any:
    """``value`` for StudyConfig field ``name``, of the field's type; StudyError otherwise."""
    default = {f.name: f for f in dataclasses.fields(StudyConfig)}[name]
    example = default.default if default.default is not dataclasses.MISSING else default.default_factory()
    if isinstance(example, tuple):
        return tuple(_as_list(value))
    if isinstance(example, dict):
        if not isinstance(value, dict):
            raise StudyError(f"{where}: {name} must be a mapping, got {value!r}")
        return dict(value)
    if isinstance(example, bool):
        if not isinstance(value, bool):
            raise StudyError(f"{where}: {name} must be true or false, got {value!r}")
        return value
    if isinstance(example, int):
        if not isinstance(value, int) or isinstance(value, bool):
            raise StudyError(f"{where}: {name} must be an integer, got {value!r}")
        return value
    if isinstance(example, float):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise StudyError(f"{where}: {name} must be a number, got {value!r}")
        return float(value)
    if value is not None and not isinstance(value, str):
        value = str(value)
    return value


def _merge(values: dict, study: dict, train: dict, where: str) -> None:
    """Sort ``values`` into study keys and train.py keys (a ``train`` mapping, or a bare train.py
    key); unknown keys and study-owned train keys are errors naming ``where``."""
    study_fields = {f.name for f in dataclasses.fields(StudyConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for key, value in values.items():
        if key == "train":
            if not isinstance(value, dict):
                raise StudyError(f"{where}: train must be a mapping of train.py keys")
            _merge({f"train.{k}": v for k, v in value.items()}, study, train, where)
        elif key.startswith("train."):
            name = key[len("train."):]
            if name not in train_fields:
                raise StudyError(f"{where}: {name!r} is not a train.py key (recipes/config.py)")
            if name in STUDY_OWNED_TRAIN_KEYS:
                raise StudyError(f"{where}: train.py key {name!r} is set by the study per run; "
                                 f"use the study keys (model, losses, seeds, loss_weights, heldout_size)")
            train[name] = value
        elif key in study_fields:
            study[key] = _coerce(key, value, where)
        elif key in train_fields:
            _merge({f"train.{key}": value}, study, train, where)
        else:
            raise StudyError(f"{where}: unknown key {key!r} (neither a study key nor a train.py key)")


def load_study_config(path: Optional[str | Path], overrides: Sequence[str] = ()) -> StudyConfig:
    """The study YAML at ``path`` (or the defaults) with ``key=value`` overrides, validated; every
    run's train.py configuration is checked here, before anything runs."""
    study: dict = {}
    train: dict = {}
    if path is not None:
        data = read_yaml_mapping(path, "study config", StudyError)
        _merge(data, study, train, str(path))
    try:
        _merge(parse_overrides(overrides), study, train, "command line")
    except ConfigError as err:
        raise StudyError(str(err)) from None
    config = StudyConfig(**study, train=train)
    config.output_root = str(Path(config.output_root).resolve())  # train.py runs with the repository as cwd
    validate(config)
    return config


def validate(config: StudyConfig) -> None:
    """Value checks, including a dry load of each run's train.py configuration."""
    from del_core import LOSS_NAMES

    unknown = [loss for loss in config.losses if loss not in LOSS_NAMES]
    if unknown or not config.losses:
        raise StudyError(f"losses: unknown {unknown or 'none given'}; choose from {', '.join(LOSS_NAMES)}")
    if len(set(config.losses)) != len(config.losses) or len(set(config.seeds)) != len(config.seeds):
        raise StudyError("losses and seeds must not repeat")
    if not config.seeds:
        raise StudyError("seeds: give at least one seed")
    for loss in config.loss_weights:
        if loss not in config.losses:
            raise StudyError(f"loss_weights: {loss!r} is not one of the study's losses {list(config.losses)}")
    bad_styles = set(config.generate_styles) - {"steps", "program"}
    if bad_styles or not config.generate_styles:
        raise StudyError(f"generate_styles: {sorted(bad_styles) or 'none given'}; choose from steps, program")
    for name in ("train_size", "heldout_size", "heldout_max_new_tokens", "eval_batch_size", "threads",
                 "benchmark_max_new_tokens"):
        if getattr(config, name) <= 0:
            raise StudyError(f"{name} must be > 0, got {getattr(config, name)}")
    if config.heldout_generate < 0 or config.benchmark_limit < 0:
        raise StudyError("heldout_generate and benchmark_limit must be >= 0")
    if config.eval_backend not in ("hf", "vllm", "auto"):
        raise StudyError(f"eval_backend must be hf, vllm or auto, got {config.eval_backend!r}")
    from recipes.evaluation.benchmarks import BenchmarkError, parse_benchmark_list

    if config.benchmarks:
        try:
            parse_benchmark_list(",".join(config.benchmarks))
        except BenchmarkError as err:
            raise StudyError(f"benchmarks: {err}") from None
    for loss in config.losses:
        try:
            load_config(None, train_overrides(config, loss, config.seeds[0], Path("runs/_check")))
        except ConfigError as err:
            raise StudyError(f"the train.py configuration of loss {loss}: {err}") from None


def _override_text(value: Any) -> str:
    """A value as train.py's ``key=value`` reads it back (YAML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else str(value)


def train_overrides(config: StudyConfig, loss: str, seed: int, run_dir: Path) -> list[str]:
    """train.py's ``key=value`` arguments for one (loss, seed) run."""
    data_dir = Path(config.output_root) / "data"
    values = {
        **config.train,
        "model": config.model, "loss": loss, "seed": seed, "loss_weight": config.loss_weights.get(loss),
        "data": data_dir / "train.jsonl", "eval_data": data_dir / "heldout.jsonl", "eval_size": config.heldout_size,
        "eval_generate": 0, "output_dir": run_dir, "export": True,
    }
    return [f"{key}={_override_text(value)}" for key, value in values.items()]


def check_resume(config: StudyConfig, root: Path) -> None:
    """Write ROOT/study_config.json on first use; later, refuse a config that would change results
    (anything but the keys of RESUMABLE_KEYS) so one table never mixes two set-ups."""
    path = root / "study_config.json"
    current = {k: v for k, v in _jsonable(dataclasses.asdict(config)).items()}
    if path.is_file():
        saved = json.loads(path.read_text())
        changed = sorted(k for k in set(saved) | set(current)
                         if k not in RESUMABLE_KEYS and saved.get(k) != current.get(k))
        if changed:
            detail = "; ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in changed)
            raise StudyError(f"{root} was started with another configuration ({detail}); use another "
                             f"--output_root or delete {root}")
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def benchmark_dir(config: StudyConfig) -> Optional[Path]:
    """The benchmark directory to use, or None (with a printed reason) when benchmarks are skipped."""
    if not config.benchmarks or config.benchmark_limit == 0:
        return None
    value = config.benchmark_dir or os.environ.get("DEL_BENCHMARK_DIR")
    if not value:
        print("[study] no benchmark directory (pass --benchmark-dir DIR or set DEL_BENCHMARK_DIR): "
              f"skipping {', '.join(config.benchmarks)}", flush=True)
        return None
    path = Path(value)
    if not path.is_dir():
        print(f"[study] benchmark directory {path} not found: skipping {', '.join(config.benchmarks)}", flush=True)
        return None
    return path


# --- data -----------------------------------------------------------------------------------
def prepare_data(config: StudyConfig, root: Path) -> tuple[Path, Path]:
    """(train.jsonl, heldout.jsonl) under ROOT/data, generated once (deterministic from the config)."""
    from recipes.study_data import make_splits, write_jsonl

    data = root / "data"
    train_path, heldout_path = data / "train.jsonl", data / "heldout.jsonl"
    if not (train_path.is_file() and heldout_path.is_file()):
        train, heldout = make_splits(config.train_size, heldout_split_size(config), config.data_seed,
                                     config.program_share)
        write_jsonl(train_path, train)
        write_jsonl(heldout_path, heldout)
        print(f"[study] data: {len(train)} training and {len(heldout)} held-out problems in {data}", flush=True)
    return train_path, heldout_path


def heldout_split_size(config: StudyConfig) -> int:
    """Rows of the held-out split: train.py evaluates the first ``heldout_size`` teacher-forced; the
    greedy answers take the first ``heldout_generate`` rows of the wanted styles, so the split holds
    ``4 * heldout_generate`` rows at least (either style is drawn about half the time)."""
    return max(config.heldout_size, 4 * config.heldout_generate)


def generation_rows(config: StudyConfig, heldout_path: Path) -> list[dict]:
    """The held-out rows answered by greedy generation: the first ``heldout_generate`` rows whose
    solution style is in ``generate_styles``; StudyError when the split holds fewer."""
    from recipes.study_data import read_jsonl

    rows = [r for r in read_jsonl(heldout_path) if r.get("style", "steps") in config.generate_styles]
    if len(rows) < config.heldout_generate:
        raise StudyError(f"{heldout_path} has {len(rows)} rows of styles {list(config.generate_styles)}, fewer than "
                         f"heldout_generate {config.heldout_generate}; raise heldout_size or program_share")
    return rows[: config.heldout_generate]


# --- one run --------------------------------------------------------------------------------
def read_records(run_dir: Path, kind: Optional[str] = None) -> list[dict]:
    """The records of RUN_DIR/metrics.jsonl (of one ``kind`` when given); [] when absent."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if kind is None or r.get("kind") == kind]


def training_done(run_dir: Path) -> bool:
    """train.py finished: metrics.jsonl holds the "final" record."""
    return bool(read_records(run_dir, "final"))


def _subprocess_env(config: StudyConfig) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(config.threads), "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see main()
    import torch

    if not torch.cuda.is_available():
        env.setdefault("DS_ACCELERATOR", "cpu")
    return env


def _run_logged(command: list[str], log_path: Path, env: dict, what: str) -> None:
    """Run ``command`` with stdout and stderr into ``log_path``; StudyError with the log's tail on failure."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-4000:]
        raise StudyError(f"{what} failed (exit {proc.returncode}); log {log_path}:\n{tail}")


def train_run(config: StudyConfig, loss: str, seed: int, run_dir: Path) -> None:
    """train.py for one (loss, seed) into ``run_dir``; a leftover unfinished run there is removed first
    (its metrics.jsonl would otherwise be appended to)."""
    if run_dir.exists():
        print(f"[study]   removing the unfinished run in {run_dir}", flush=True)
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    command = [sys.executable, str(TRAIN), *train_overrides(config, loss, seed, run_dir)]
    _run_logged(command, run_dir.parent / f"{run_dir.name}.train.log", _subprocess_env(config),
                f"training {loss} seed {seed}")
    if not training_done(run_dir):
        raise StudyError(f"training {loss} seed {seed} exited 0 but wrote no final record in {run_dir}/metrics.jsonl")


def score_heldout(rows: Sequence[dict], outputs: Sequence[str]) -> tuple[list[dict], dict]:
    """(scored rows, summary) of greedy ``outputs`` to held-out ``rows`` (each with ``answer``).

    Summary: n, exact_acc, answered, and over answered rows mae, log_mae, digit_acc by place
    (``recipes/evaluation/scoring.summarize`` on rows of kind "number")."""
    from recipes.evaluation.extract import answer_from_text
    from recipes.evaluation.numbers import numbers_match
    from recipes.evaluation.scoring import summarize

    if len(rows) != len(outputs):
        raise ValueError(f"{len(rows)} rows but {len(outputs)} outputs")
    scored = []
    for index, (row, output) in enumerate(zip(rows, outputs)):
        answer = answer_from_text(output, "number")
        scored.append({"benchmark": "heldout", "index": index, "kind": "number", "instruction": row["instruction"],
                       "output": output, "answer": answer, "gold": row["answer"],
                       "correct": numbers_match(answer, row["answer"]), "unanswered": answer is None})
    if not scored:
        return [], {"n": 0, "exact_acc": None, "answered": None, "mae": None, "log_mae": None, "digit_acc": {}}
    summary = summarize(scored)
    heldout, numeric = summary["benchmarks"]["heldout"], summary["numeric"]
    return scored, {"n": heldout["n"], "exact_acc": heldout["accuracy"],
                    "answered": 1 - heldout["unanswered"] / heldout["n"], "mae": numeric["mae"],
                    "log_mae": numeric["log_mae"], "digit_acc": numeric.get("digit_acc", {})}


def evaluate_heldout(config: StudyConfig, model: str, rows: Sequence[dict], out_dir: Path) -> None:
    """Greedy answers of ``model`` to ``rows`` (the training prompt template, batched HF generate),
    scored into OUT_DIR/predictions.jsonl and OUT_DIR/summary.json (written last: the done marker)."""
    import torch

    from recipes.evaluation.generation import HFGenerator, resolve_model
    from recipes.evaluation.report import write_json, write_jsonl
    from recipes.prompting import format_prompt

    started = time.time()
    torch.set_num_threads(config.threads)
    generator = HFGenerator(resolve_model(model), batch_size=config.eval_batch_size,
                            max_new_tokens=config.heldout_max_new_tokens)
    outputs = generator.generate([format_prompt(r["instruction"], r.get("input", "")) for r in rows], desc="held-out")
    del generator
    scored, summary = score_heldout(rows, outputs)
    summary["seconds"] = round(time.time() - started, 1)
    write_jsonl(out_dir / "predictions.jsonl", scored)
    write_json(out_dir / "summary.json", summary)


def evaluate_benchmarks(config: StudyConfig, model: str, data_dir: Path, out_dir: Path) -> None:
    """``recipes/evaluate.py`` on the first ``benchmark_limit`` questions of each benchmark, into
    OUT_DIR (summary.json is its done marker); its console output goes to OUT_DIR.log."""
    command = [sys.executable, str(EVALUATE), model, "--data-dir", str(data_dir),
               "--benchmarks", ",".join(config.benchmarks), "--limit", str(config.benchmark_limit),
               "--backend", config.eval_backend, "--max-new-tokens", str(config.benchmark_max_new_tokens),
               "--batch-size", str(config.eval_batch_size), "--threads", str(config.threads),
               "--workers", str(max(1, config.threads)), "--output-dir", str(out_dir)]
    _run_logged(command, out_dir.parent / f"{out_dir.name}.log", _subprocess_env(config), f"evaluate.py on {model}")


def evaluation_done(unit_dir: Path, with_benchmarks: bool) -> bool:
    """Both evaluations of a run (or of the reference) have written their summary.json."""
    return (unit_dir / "heldout" / "summary.json").is_file() and (
        not with_benchmarks or (unit_dir / "benchmarks" / "summary.json").is_file())


def drop_weights(run_dir: Path) -> None:
    """Delete RUN_DIR/final's weight files (keep_weights: false); config and tokenizer stay."""
    for path in (run_dir / "final").glob("*.safetensors"):
        path.unlink()


# --- metrics and aggregation ------------------------------------------------------------------
def _read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.is_file() else None


def evaluation_metrics(unit_dir: Path) -> dict:
    """Held-out generation and benchmark metrics of a run or the reference (None where missing)."""
    heldout = _read_json(unit_dir / "heldout" / "summary.json") or {}
    metrics = {"exact_acc": heldout.get("exact_acc"), "answered": heldout.get("answered"),
               "mae": heldout.get("mae"), "log_mae": heldout.get("log_mae")}
    bench = _read_json(unit_dir / "benchmarks" / "summary.json")
    if bench:
        for name, stats in bench["benchmarks"].items():
            metrics[f"{name}_acc"] = stats["accuracy"]
        metrics["bench_macc"] = bench["mACC"]
        metrics["bench_log_mae"] = bench["numeric"]["log_mae"]
    return metrics


def run_metrics(run_dir: Path) -> dict:
    """The metrics of one finished run (module docstring) plus its training curve."""
    evals = read_records(run_dir, "eval")
    final = read_records(run_dir, "final")
    after = evals[-1] if evals else {}
    metrics = {
        "tf_number_acc": after.get("number_acc"), "tf_digit_acc": after.get("digit_acc"),
        "tf_digit_entropy": after.get("digit_entropy"), "tf_ce": after.get("ce"),
        "train_time_s": final[0].get("train_time_s") if final else None,
        **evaluation_metrics(run_dir),
    }
    curve = [{"step": r["step"], "ce": r["ce"], "loss": r["loss"], "digit_entropy": r.get("digit_entropy")}
             for r in read_records(run_dir, "train")]
    before = next((r for r in evals if r.get("step") == 0), None)
    return {"metrics": metrics, "curve": curve, "before": before}


def aggregate(values: Sequence[Optional[float]]) -> dict:
    """{"mean", "std", "n", "values"} of the finite numbers in ``values`` (None and NaN are left
    out); std is the sample standard deviation (n - 1), None for fewer than two values; mean is None
    for none."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(kept)
    mean = sum(kept) / n if n else None
    std = math.sqrt(sum((v - mean) ** 2 for v in kept) / (n - 1)) if n >= 2 else None
    return {"mean": mean, "std": std, "n": n, "values": kept}


def mean_curve(curves: Sequence[Sequence[dict]], key: str = "ce") -> dict:
    """Per step, the mean and std over seeds of ``key`` (steps present in every curve)."""
    if not curves:
        return {"step": [], "mean": [], "std": []}
    steps = sorted(set.intersection(*(set(r["step"] for r in c) for c in curves)))
    by_step = [{r["step"]: r[key] for r in c} for c in curves]
    stats = [aggregate([c[s] for c in by_step]) for s in steps]
    return {"step": steps, "mean": [s["mean"] for s in stats], "std": [s["std"] or 0.0 for s in stats]}


def collect_results(config: StudyConfig, root: Path) -> dict:
    """Everything the report needs, from the files under ROOT: per loss the aggregated metrics over
    the seeds that finished, the mean training curves, and the reference (pretrained) row."""
    runs: dict = {}
    befores = []
    for loss in config.losses:
        for seed in config.seeds:
            run_dir = root / loss / f"seed{seed}"
            if training_done(run_dir):
                runs.setdefault(loss, {})[seed] = run_metrics(run_dir)
                if runs[loss][seed]["before"]:
                    befores.append(runs[loss][seed]["before"])
    names = sorted({k for per in runs.values() for r in per.values() for k in r["metrics"]})
    losses = {loss: {name: aggregate([r["metrics"].get(name) for r in per.values()]) for name in names}
              for loss, per in runs.items()}
    curves = {loss: mean_curve([r["curve"] for r in per.values()]) for loss, per in runs.items()}
    reference = evaluation_metrics(root / "pretrained")
    for key, record_key in (("tf_number_acc", "number_acc"), ("tf_digit_acc", "digit_acc"),
                            ("tf_digit_entropy", "digit_entropy"), ("tf_ce", "ce")):
        reference[key] = aggregate([b.get(record_key) for b in befores])["mean"]
    return {
        "model": config.model, "losses": losses, "curves": curves, "reference": reference,
        "runs": {loss: {str(seed): r["metrics"] for seed, r in per.items()} for loss, per in runs.items()},
        "seeds": list(config.seeds),
        "config": _jsonable(dataclasses.asdict(config)),
    }


# --- the study ------------------------------------------------------------------------------
@dataclass
class Unit:
    """One step of the study: the reference evaluation or one (loss, seed) run."""

    name: str
    directory: Path
    loss: Optional[str] = None
    seed: Optional[int] = None


def plan_units(config: StudyConfig, root: Path) -> list[Unit]:
    """The reference first, then seed by seed every loss (an interrupted study has whole seeds)."""
    units = [Unit("pretrained", root / "pretrained")]
    for seed in config.seeds:
        units += [Unit(f"{loss} seed {seed}", root / loss / f"seed{seed}", loss, seed) for loss in config.losses]
    return units


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def run_unit(config: StudyConfig, unit: Unit, rows: Sequence[dict], data_dir: Optional[Path],
             log: Callable[[str], None]) -> bool:
    """Train (runs only) and evaluate one unit, skipping what is done; True when anything ran."""
    did = False
    if unit.loss is not None:
        if training_done(unit.directory):
            log(f"[study]   training skipped: {unit.directory}/metrics.jsonl has its final record")
        else:
            started = time.time()
            train_run(config, unit.loss, unit.seed, unit.directory)
            log(f"[study]   trained in {_clock(time.time() - started)}")
            did = True
    model = str(unit.directory) if unit.loss is not None else config.model
    with_benchmarks = data_dir is not None
    if evaluation_done(unit.directory, with_benchmarks):
        log("[study]   evaluation skipped: summaries exist")
        return did
    if not (unit.directory / "heldout" / "summary.json").is_file():
        started = time.time()
        evaluate_heldout(config, model, rows, unit.directory / "heldout")
        log(f"[study]   held-out answers ({len(rows)}) in {_clock(time.time() - started)}")
    if with_benchmarks and not (unit.directory / "benchmarks" / "summary.json").is_file():
        started = time.time()
        evaluate_benchmarks(config, model, data_dir, unit.directory / "benchmarks")
        log(f"[study]   {', '.join(config.benchmarks)} ({config.benchmark_limit} each) in {_clock(time.time() - started)}")
    if unit.loss is not None and not config.keep_weights:
        drop_weights(unit.directory)
    return True


def run_study(config: StudyConfig, report_only: bool = False, log: Callable[[str], None] = print) -> dict:
    """Run (or continue) the whole study, then write the report; returns the results dict."""
    from recipes.study_report import write_report

    root = Path(config.output_root)
    started = time.time()
    if not report_only:
        check_resume(config, root)
        _, heldout_path = prepare_data(config, root)
        rows = generation_rows(config, heldout_path)
        data_dir = benchmark_dir(config)
        units = plan_units(config, root)
        durations: list[float] = []
        for number, unit in enumerate(units, start=1):
            remaining = len(units) - number + 1
            eta = f", ETA {_clock(sum(durations) / len(durations) * remaining)}" if durations else ""
            log(f"[study] {number}/{len(units)} {unit.name}: elapsed {_clock(time.time() - started)}{eta}")
            unit_started = time.time()
            if run_unit(config, unit, rows, data_dir, lambda text: log(text)):
                durations.append(time.time() - unit_started)
                _append_timing(root, unit, time.time() - unit_started)
            else:
                log(f"[study]   skipped {unit.name}: done before")
    results = collect_results(config, root)
    results["wall_time_s"] = round(time.time() - started, 1)
    results["unit_times_s"] = _read_timings(root)
    write_report(results, root)
    log(f"[study] wrote {root / 'results.md'}, {root / 'results.json'} and {root / 'results.png'} "
        f"after {_clock(time.time() - started)}")
    return results


def _append_timing(root: Path, unit: Unit, seconds: float) -> None:
    with open(root / "timings.jsonl", "a") as handle:
        handle.write(json.dumps({"unit": unit.name, "seconds": round(seconds, 1)}) + "\n")


def _read_timings(root: Path) -> dict:
    """Unit name -> seconds of its last timed (not skipped) execution."""
    path = root / "timings.jsonl"
    if not path.is_file():
        return {}
    return {r["unit"]: r["seconds"] for r in map(json.loads, path.read_text().splitlines()) if r}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     usage="%(prog)s [STUDY.yaml] [--report-only] [--key value ...]")
    parser.add_argument("config", nargs="?", help="a study YAML (recipes/configs/study-*.yaml); omitted: defaults")
    parser.add_argument("--report-only", action="store_true", help="only rewrite results.* from existing outputs")
    args, unknown = parser.parse_known_args(argv)
    # Busy-waiting OpenMP threads are many times slower when another job shares the cores (measured
    # here: greedy generation 5x slower with 2 spinning threads); set before torch is imported.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    overrides = []
    tokens = iter(unknown)
    for token in tokens:
        if not token.startswith("--"):
            parser.error(f"unexpected argument {token!r} (overrides are --key value)")
        if "=" in token:
            overrides.append(token[2:])
        else:
            value = next(tokens, None)
            if value is None:
                parser.error(f"{token} needs a value")
            overrides.append(f"{token[2:]}={value}")
    try:
        config = load_study_config(args.config, overrides)
        run_study(config, report_only=args.report_only, log=lambda text: print(text, flush=True))
    except StudyError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
