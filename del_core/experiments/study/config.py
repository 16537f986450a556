"""The study's configuration: :class:`StudyConfig` (a structured config of :mod:`del_core.config`),
its output layout :class:`StudyPaths`, and the training configuration of each run
(:func:`train_config`, a :class:`~del_core.training.config.TrainConfig`), validated before anything runs.

    config = load_study_config("recipes/configs/study-cpu.yaml", ["losses=mle,del", "max_steps=2"])

Overrides are ``key=value``: a key of :class:`StudyConfig` sets the study; a training key
(``run.max_steps``, ``optimizer.lr``; also ``train.<key>`` or ``train={run: {max_steps: 2}}``)
goes to the ``train`` section, shared by every run. The short forms of
:data:`~del_core.training.config.SHORT_KEYS` (``max_steps``, ``lr``) are deprecated: still placed,
with a warning naming the dotted key. The training keys are read by the training
configuration's own loader (:func:`del_core.config.placed_keys` with
:data:`~del_core.training.config.TRAIN_ALIASES`): an unknown one is named with the closest known keys,
a removed one (``loss_weight``) with the key that replaced it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import yaml

from del_core.config import ConfigError, config_to_dict, load_config, placed_keys, warn_deprecated
from del_core.losses import LOSS_NAMES
from del_core.models.sources import ModelSourceError, check_model_source
from del_core.training.config import SHORT_KEYS, TRAIN_ALIASES, TrainConfig

# Keys that may change between invocations on the same output_root (they do not change results).
RESUMABLE_KEYS = ("losses", "seeds", "output_root", "threads", "benchmark_dir", "eval_batch_size", "keep_weights")


class StudyError(RuntimeError):
    """A bad study configuration or a failed step; the message says which and where."""


@dataclass
class StudyConfig:
    """Every key of a study YAML file. Sizes are in problems (rows) and tokens."""

    model: str = "smollm2"  # the starting model of every run (a del_core.models.sources source)
    losses: list[str] = field(default_factory=lambda: list(LOSS_NAMES))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    output_root: str = "runs/study"
    # loss -> lambda, or "auto" (lambda from the first batch, docs/lambda.md); absent = the loss's default
    loss_weights: dict[str, Any] = field(default_factory=dict)
    auto_ratios: dict[str, float] = field(default_factory=dict)  # loss -> loss.auto_ratio of its "auto"
    # data (del_core.experiments.study.problem_rows)
    problem_set: str = "study"  # a problem set of del_core.data.synthetic (study, basic, training)
    solution_style: str = "steps"  # rows not written as programs: steps, or equation (the steps alone)
    data_seed: int = 1234
    train_size: int = 400
    heldout_size: int = 48  # held-out rows scored teacher-forced (answer accuracy, digit entropy, CE)
    heldout_generate: int = 16  # held-out rows answered by greedy generation (of the styles below)
    generate_styles: list[str] = field(default_factory=lambda: ["steps"])  # steps, program, equation
    program_share: float = 0.5  # share of rows written as programs
    # chat only: every row becomes a conversation opening with this system turn ("" = an empty one),
    # and the benchmarks are asked with it; None: Alpaca rows, asked with the chat template's default
    # system turn (SmolLM2's is 16 tokens)
    system_prompt: Optional[str] = None
    heldout_max_new_tokens: int = 40
    # benchmarks (del_core.evaluation.benchmarks.runner, what recipes/evaluate.py runs)
    benchmarks: list[str] = field(default_factory=lambda: ["gsm8k", "svamp"])  # empty: none
    benchmark_limit: int = 4  # the first N questions of each benchmark
    benchmark_max_new_tokens: int = 128
    benchmark_dir: Optional[str] = None  # default $DEL_BENCHMARK_DIR, else the repository's data/benchmarks
    eval_backend: str = "hf"  # hf, vllm or auto (EvalConfig.backend)
    eval_batch_size: int = 8
    # machine
    threads: int = 2  # OMP threads of training and torch threads of evaluation (CPU)
    keep_weights: bool = True  # False: delete OUTPUT_DIR/final/*.safetensors once a run is evaluated
    # training keys shared by every run, nested by section ({run: {max_steps: 6}}); del_core.training.config
    train: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_lists()
        for name in (
            "train_size",
            "heldout_size",
            "heldout_max_new_tokens",
            "eval_batch_size",
            "threads",
            "benchmark_max_new_tokens",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.heldout_generate < 0 or self.benchmark_limit < 0:
            raise ConfigError("heldout_generate and benchmark_limit must be >= 0")
        if not 0.0 <= self.program_share <= 1.0:
            raise ConfigError(f"program_share must be in [0, 1], got {self.program_share}")
        if self.solution_style not in ("steps", "equation"):
            raise ConfigError(f"solution_style must be steps or equation, got {self.solution_style!r}")
        from del_core.data.synthetic import PROBLEM_SETS

        if self.problem_set not in PROBLEM_SETS:
            raise ConfigError(f"problem_set: unknown {self.problem_set!r}; choose from {', '.join(PROBLEM_SETS)}")
        if self.eval_backend not in ("hf", "vllm", "auto"):
            raise ConfigError(f"eval_backend must be hf, vllm or auto, got {self.eval_backend!r}")
        if self.benchmarks:
            from del_core.evaluation.benchmarks.files import BenchmarkError, parse_benchmark_list

            try:
                parse_benchmark_list(",".join(self.benchmarks))
            except BenchmarkError as err:
                raise ConfigError(f"benchmarks: {err}") from None

    def _check_lists(self) -> None:
        unknown = [loss for loss in self.losses if loss not in LOSS_NAMES]
        if unknown or not self.losses:
            raise ConfigError(f"losses: unknown {unknown or 'none given'}; choose from {', '.join(LOSS_NAMES)}")
        if not self.seeds:
            raise ConfigError("seeds: give at least one seed")
        if len(set(self.losses)) != len(self.losses) or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError("losses and seeds must not repeat")
        for key in ("loss_weights", "auto_ratios"):
            for loss in getattr(self, key):
                if loss not in LOSS_NAMES:
                    raise ConfigError(f"{key}: {loss!r} is not a loss; choose from {', '.join(LOSS_NAMES)}")
        bad_styles = set(self.generate_styles) - {"steps", "program", "equation"}
        if bad_styles or not self.generate_styles:
            raise ConfigError(
                f"generate_styles: {sorted(bad_styles) or 'none given'}; choose from steps, program, equation"
            )


STUDY_KEYS = tuple(f.name for f in fields(StudyConfig))
_LIST_KEYS = tuple(name for name, hint in typing.get_type_hints(StudyConfig).items() if typing.get_origin(hint) is list)


@dataclass(frozen=True)
class StudyPaths:
    """Where a study writes, under ``root`` (its output_root)."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def train_data(self) -> Path:
        return self.data / "train.jsonl"

    @property
    def heldout_data(self) -> Path:
        return self.data / "heldout.jsonl"

    @property
    def pretrained(self) -> Path:
        """The reference (the starting model) evaluated like the runs."""
        return self.root / "pretrained"

    def run_dir(self, loss: str, seed: int) -> Path:
        return self.root / loss / f"seed{seed}"


# Training keys the study sets for every run itself (from model, losses, seeds, loss_weights and its data).
STUDY_OWNED_KEYS = (
    "model.name",
    "loss.name",
    "loss.weight",
    "loss.auto_ratio",
    "run.seed",
    "data.source",
    "data.eval_source",
    "data.eval_size",
    "data.eval_generate",
    "run.output_dir",
    "run.export",
    "run.resume",
)
_TRAIN_SECTIONS = tuple(f.name for f in fields(TrainConfig))


def shared_train_config(config: StudyConfig) -> TrainConfig:
    """The training configuration every run shares: the defaults with the study's ``train`` section."""
    return load_config(TrainConfig, layers=[(config.train, "train")], aliases=TRAIN_ALIASES)


def train_config(config: StudyConfig, loss: str, seed: int, run_dir: Path) -> TrainConfig:
    """The training configuration of one (loss, seed) run into ``run_dir``: the shared one
    (:func:`shared_train_config`) with the keys the study owns. The study scores every run itself
    (:mod:`del_core.experiments.study.score_unit`), so the trainer's held-out evaluation is off."""
    shared = shared_train_config(config)
    weight = {"weight": config.loss_weights.get(loss)}
    if loss in config.auto_ratios:
        weight["auto_ratio"] = config.auto_ratios[loss]
    train_data = str(StudyPaths(Path(config.output_root)).train_data)
    return dataclasses.replace(
        shared,
        model=dataclasses.replace(shared.model, name=config.model),
        loss=dataclasses.replace(shared.loss, name=loss, **weight),
        data=dataclasses.replace(shared.data, source=train_data, eval_size=0, eval_generate=0),
        run=dataclasses.replace(shared.run, seed=seed, output_dir=str(run_dir), export=True),
    )


def _is_training_key(key: str) -> bool:
    """A key of the training configuration: dotted, short (:data:`SHORT_KEYS`), or one it no longer
    reads (its loader names the replacement)."""
    return key in TRAIN_ALIASES.removed or key.split(".")[0] in ("train", *_TRAIN_SECTIONS)


def _dotted_training_key(key: str) -> str:
    """``key`` (``train.`` prefix optional) at its dotted place when it is a short form (deprecated:
    a warning names the dotted key)."""
    key = key.removeprefix("train.")
    if key in SHORT_KEYS:
        warn_deprecated(f"the study's short training key '{key}'", f"'{SHORT_KEYS[key]}'")
    return SHORT_KEYS.get(key, key)


def _split_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str], list[dict]]:
    """(study overrides, training overrides, the mappings of ``train={...}``) of command-line
    ``key=value`` overrides; a list-valued study key given one value (``seeds=0``) or ``none`` is
    written as a YAML list for the loader."""
    study: list[str] = []
    train: list[str] = []
    mappings: list[dict] = []
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep:
            raise ConfigError(f"override {item!r}: expected key=value")
        if key in STUDY_KEYS and key != "train":
            if key in _LIST_KEYS and not text.strip().startswith("["):
                text = "[]" if text.strip() in ("", "none") else f"[{text}]"
            study.append(f"{key}={text}")
        elif key == "train":
            mapping = yaml.safe_load(text) if text.strip() else {}
            if not isinstance(mapping, dict):
                raise ConfigError(f"command line: train must be a mapping of training keys, got {text!r}")
            mappings.append({_dotted_training_key(inner): value for inner, value in mapping.items()})
        elif _is_training_key(key):
            train.append(f"{_dotted_training_key(key)}={text}")
        else:
            study.append(f"{key}={text}")  # the loader names the unknown key and close study keys
    return study, train, mappings


def _merged(layers: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{section: {key: value}}`` of placed layers, a later layer's key replacing an earlier one's."""
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            merged.setdefault(section, {}).update(values)
    return merged


def _train_section(
    config: StudyConfig, recipe: Optional[str | Path], overrides: Sequence[str], mappings: Sequence[dict]
) -> dict[str, dict[str, Any]]:
    """The study's ``train`` section from the recipe's ``train:`` mapping, then the command line's,
    every key at its dotted place and typed by the training schema (the short forms of
    :data:`SHORT_KEYS` are the command line's, placed by :func:`_split_overrides`; in the recipe,
    as anywhere else, a removed key is refused). A key the study owns is refused."""
    where = f"{recipe}: train" if recipe is not None else "train"
    placed = [(placed_keys(TrainConfig, config.train, aliases=TRAIN_ALIASES, where=where), where)]
    placed += [(placed_keys(TrainConfig, mapping, aliases=TRAIN_ALIASES), "command line") for mapping in mappings]
    placed.append((placed_keys(TrainConfig, None, overrides, aliases=TRAIN_ALIASES), "command line"))
    merged = _merged([layer for layer, _ in placed])
    owned = sorted(f"{s}.{k}" for s, values in merged.items() for k in values if f"{s}.{k}" in STUDY_OWNED_KEYS)
    if owned:
        raise ConfigError(
            f"{owned[0]!r} is set by the study for each run; use the study keys "
            "(model, losses, seeds, loss_weights, auto_ratios, heldout_size)"
        )
    typed = config_to_dict(load_config(TrainConfig, layers=placed, aliases=TRAIN_ALIASES))
    return {section: {name: typed[section][name] for name in values} for section, values in merged.items()}


def _check_runs(config: StudyConfig) -> None:
    """Every loss's full training configuration builds (its lambda, auto ratio...) and the model
    and tokenizer sources name something loadable. The data files are the study's own, written
    by its data step after this check, so they are checked when a run starts."""
    for loss in config.losses:
        try:
            train = train_config(config, loss, config.seeds[0], Path(config.output_root) / loss / "check")
        except ValueError as err:  # ConfigError included
            raise ConfigError(f"the training configuration of loss {loss}: {err}") from None
    try:
        check_model_source(config.model, "model")
        if train.model.tokenizer:
            check_model_source(train.model.tokenizer, "train.model.tokenizer")
    except ModelSourceError as err:
        raise ConfigError(str(err)) from None


def load_study_config(recipe: Optional[str | Path] = None, overrides: Sequence[str] = ()) -> StudyConfig:
    """The study YAML ``recipe`` (or the defaults) with ``key=value`` overrides (module docstring),
    validated, with every run's training configuration built once; :class:`StudyError` names the
    bad key and where it was written."""
    try:
        study_overrides, train_overrides, train_mappings = _split_overrides(overrides)
        config = load_config(StudyConfig, recipe, study_overrides)
        config.train = _train_section(config, recipe, train_overrides, train_mappings)
        if config.system_prompt is not None and config.train.get("data", {}).get("prompt_format") != "chat":
            raise ConfigError("system_prompt needs train.data.prompt_format=chat (an Alpaca prompt has no system turn)")
        _check_runs(config)
    except ConfigError as err:
        raise StudyError(str(err)) from None
    config.output_root = str(Path(config.output_root).resolve())  # the runs' paths do not depend on the cwd
    return config
