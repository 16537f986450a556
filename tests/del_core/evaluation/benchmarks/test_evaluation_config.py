"""recipes/evaluate.py's options (del_core.evaluation.benchmarks.config): every flag spelling reaches EvalConfig,
and bad values are one-line ConfigErrors raised before anything is loaded."""

from __future__ import annotations

import dataclasses

import pytest

from del_core.config import ConfigError
from del_core.evaluation.benchmarks.config import EvalConfig, load_eval_config, options_help
from del_core.evaluation.benchmarks.runner import generation_lengths
from del_core.evaluation.benchmarks.zero_shot import GenerationLengths


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "config.json").write_text("{}")
    return str(tmp_path)


def test_flags_in_every_spelling(model_dir):
    config = load_eval_config(
        [model_dir, "--data-dir", "/data", "--benchmarks=gsm8k,svamp", "limit=5", "--max_new_tokens", "16",
         "--batch-size", "4", "--backend", "hf", "--tp", "2", "--dtype", "float32", "--threads", "3",
         "--workers", "2", "--program-seconds", "2.5", "--program-cpu-seconds", "1", "--output-dir", "out"]
    )  # fmt: skip
    assert config == EvalConfig(
        model=model_dir, data_dir="/data", benchmarks="gsm8k,svamp", limit=5, output_dir="out", backend="hf", tp=2,
        batch_size=4, max_new_tokens=16, dtype="float32", threads=3, workers=2, program_seconds=2.5,
        program_cpu_seconds=1,
    )  # fmt: skip
    defaults = load_eval_config([model_dir])
    assert (defaults.benchmarks, defaults.backend, defaults.max_new_tokens, defaults.limit) == (
        "all",
        "auto",
        None,
        None,
    )
    assert generation_lengths(defaults) == GenerationLengths(open_ended=1500, choice=2048)
    assert generation_lengths(load_eval_config([model_dir, "--max-new-tokens", "16"])) == GenerationLengths(16, 16)
    lengths = load_eval_config([model_dir, "--open-max-new-tokens", "100", "--choice-max-new-tokens", "200"])
    assert generation_lengths(lengths) == GenerationLengths(100, 200) and defaults.sandbox == "auto"
    assert load_eval_config(["--score-only", "p.jsonl", "--output", "o.jsonl"]).score_only == "p.jsonl"


def test_a_yaml_file_of_options(tmp_path, model_dir):
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(f"model: {model_dir}\nlimit: 3\nbackend: hf\n")
    config = load_eval_config([str(recipe), "limit=4"])
    assert (config.model, config.limit, config.backend) == (model_dir, 4, "hf")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bakend", "hf"], "unknown key 'bakend' (did you mean backend"),
        (["--limit", "many"], "limit"),
        (["--limit", "0"], "limit must be >= 1, got 0"),
        (["--backend", "tpu"], "backend must be one of auto, vllm, hf, got 'tpu'"),
        (["--dtype", "half"], "dtype must be one of auto, bfloat16, float16, float32, got 'half'"),
        (["--workers", "0"], "workers must be >= 1, got 0"),
        (["--program-seconds", "0"], "program_seconds must be > 0"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_bad_values_name_the_key(model_dir, args, message):
    with pytest.raises(ConfigError) as caught:
        load_eval_config([model_dir, *args])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_model_and_score_only_inputs_are_checked_first(tmp_path):
    with pytest.raises(ConfigError, match="give MODEL"):
        load_eval_config([])
    with pytest.raises(ConfigError, match="needs --output OUT.jsonl"):
        load_eval_config(["--score-only", "p.jsonl"])
    with pytest.raises(ConfigError, match=r"holds no config\.json"):
        load_eval_config([str(tmp_path)])
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_eval_config([str(tmp_path / "missing")])


def test_help_lists_every_option():
    text = options_help()
    assert all(f"--{f.name.replace('_', '-')} " in text for f in dataclasses.fields(EvalConfig))
