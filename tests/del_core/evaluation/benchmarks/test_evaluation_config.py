"""recipes/evaluate.py's options (del_core.evaluation.benchmarks.config): every key=value reaches EvalConfig
(and the deprecated 0.1 flags the same configuration),
and bad values are one-line ConfigErrors raised before anything is loaded."""

from __future__ import annotations

import dataclasses
import warnings

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


NEW_STYLE = ["data_dir=/data", "benchmarks=gsm8k,svamp", "limit=5", "max_new_tokens=16", "batch_size=4",
             "backend=hf", "tp=2", "dtype=float32", "threads=3", "workers=2", "program_seconds=2.5",
             "program_cpu_seconds=1", "output_dir=out"]  # fmt: skip


def test_every_key_as_key_value(model_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_eval_config([model_dir, *NEW_STYLE])
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
    assert generation_lengths(load_eval_config([model_dir, "max_new_tokens=16"])) == GenerationLengths(16, 16)
    lengths = load_eval_config([model_dir, "open_max_new_tokens=100", "choice_max_new_tokens=200"])
    assert generation_lengths(lengths) == GenerationLengths(100, 200) and defaults.sandbox == "auto"
    assert load_eval_config(["score_only=p.jsonl", "output=o.jsonl"]).score_only == "p.jsonl"


def test_the_0_1_flags_are_deprecated_and_give_the_same_configuration(model_dir):
    old = [model_dir, "--data-dir", "/data", "--benchmarks=gsm8k,svamp", "limit=5", "--max_new_tokens", "16",
           "--batch-size", "4", "--backend", "hf", "--tp", "2", "--dtype", "float32", "--threads", "3",
           "--workers", "2", "--program-seconds", "2.5", "--program-cpu-seconds", "1",
           "--output-dir", "out"]  # fmt: skip
    with pytest.warns(FutureWarning) as caught:
        config = load_eval_config(old)
    assert len(caught) == 12  # every flag, not limit=5
    assert str(caught[0].message) == (
        "the option '--data-dir /data' is deprecated and will be removed in 0.4; use 'data_dir=/data'"
    )
    assert config == load_eval_config([model_dir, *NEW_STYLE])
    with pytest.warns(FutureWarning) as caught:
        assert load_eval_config(["--score-only", "p.jsonl", "--output", "o.jsonl"]).score_only == "p.jsonl"
    assert [str(w.message).rpartition("; ")[2] for w in caught] == ["use 'score_only=p.jsonl'", "use 'output=o.jsonl'"]


def test_a_yaml_file_of_options(tmp_path, model_dir):
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(f"model: {model_dir}\nlimit: 3\nbackend: hf\n")
    config = load_eval_config([str(recipe), "limit=4"])
    assert (config.model, config.limit, config.backend) == (model_dir, 4, "hf")


@pytest.mark.parametrize(
    "args, message",
    [
        (["bakend=hf"], "unknown key 'bakend' (did you mean backend"),
        (["limit=many"], "limit"),
        (["limit=0"], "limit must be >= 1, got 0"),
        (["backend=tpu"], "backend must be one of auto, vllm, hf, got 'tpu'"),
        (["dtype=half"], "dtype must be one of auto, bfloat16, float16, float32, got 'half'"),
        (["workers=0"], "workers must be >= 1, got 0"),
        (["program_seconds=0"], "program_seconds must be > 0"),
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
    with pytest.raises(ConfigError, match="score_only needs output=OUT.jsonl"):
        load_eval_config(["score_only=p.jsonl"])
    with pytest.raises(ConfigError, match=r"holds no config\.json"):
        load_eval_config([str(tmp_path)])
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_eval_config([str(tmp_path / "missing")])


def test_help_lists_every_option():
    text = options_help()
    assert [line.split()[0].partition("=")[0] for line in text.splitlines()] == [
        f.name for f in dataclasses.fields(EvalConfig)
    ]
    assert "  limit=N " in text and "  backend=auto " in text
