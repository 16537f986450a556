"""The one configuration mechanism (del_core.config) on the training schema: recipes, bases,
overrides, the removed flat keys of release 0.1, and errors that name the key and where it came from."""

from __future__ import annotations

import typing
import warnings

import pytest

from del_core.config import ConfigError, config_to_dict, keys_help, split_command_line
from del_core.training.config import SHORT_KEYS, TRAIN_ALIASES, TrainConfig, load_train_config
from helpers.shared import REPO

CONFIGS = REPO / "recipes" / "configs"


def test_split_command_line_reads_key_value_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recipe, overrides = split_command_line(["r.yaml", "loss=mle", "run.max_steps=3", "x.y=1", "--local_rank=0"])
    assert recipe == "r.yaml"
    assert overrides == ["loss=mle", "run.max_steps=3", "x.y=1"]
    assert split_command_line(["loss=mle"]) == (None, ["loss=mle"])
    with pytest.raises(ConfigError, match="unexpected argument 'stray' \\(expected key=value\\)"):
        split_command_line(["r.yaml", "stray"])


def test_the_0_1_option_forms_are_deprecated_and_read_as_key_value():
    """``--key value``, ``--key=value`` and a bare ``--flag`` give the overrides of ``key=value``,
    each warning with the spelling that replaces it."""
    old = ["r.yaml", "loss=mle", "--run.max-steps", "3", "--packing=true", "--report-only", "x.y=1", "--local_rank=0"]
    new = ["r.yaml", "loss=mle", "run.max_steps=3", "packing=true", "report_only=true", "x.y=1"]
    with pytest.warns(FutureWarning) as caught:
        assert split_command_line(old) == split_command_line(new)
    assert [str(w.message) for w in caught] == [
        f"the option {was} is deprecated and will be removed in 0.4; use {now}"
        for was, now in [
            ("'--run.max-steps 3'", "'run.max_steps=3'"),
            ("'--packing=true'", "'packing=true'"),
            ("'--report-only'", "'report_only=true'"),
        ]
    ]


def test_keys_help_lists_every_dotted_key_with_its_default():
    lines = keys_help(TrainConfig).splitlines()
    listed = [line.split()[0].partition("=")[0] for line in lines]
    defaults = config_to_dict(TrainConfig())  # the reference: the configuration mechanism's own view
    assert listed == [f"{section}.{key}" for section, values in defaults.items() for key in values]
    assert "  optimizer.lr=5e-06" in lines


def test_recipe_then_dotted_overrides(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("loss: {name: del, weight: 0.256}\noptimizer: {lr: 1.0e-5}\nrun: {global_batch_size: 16}\n")
    config = load_train_config(
        recipe,
        [
            "optimizer.lr=3e-6",
            "loss=dist2",
            "run.report_to=jsonl,wandb",
            "loss.options={tau: 0.3}",  # an option of dist2 (an unknown one is refused)
            "model.tokenizer=",
        ],
    )
    assert (config.loss.name, config.loss.weight, config.optimizer.lr) == ("dist2", 0.256, 3e-6)
    assert config.run.global_batch_size == 16 and config.run.report_to == ["jsonl", "wandb"]
    assert config.loss.options == {"tau": 0.3} and config.model.tokenizer is None
    assert load_train_config(None, ["run.report_to=jsonl"]).run.report_to == ["jsonl"]
    assert load_train_config(None, ["optimizer.betas=[0.8, 0.9]"]).optimizer.betas == [0.8, 0.9]


@pytest.mark.parametrize(
    "old, new",
    [
        ("loss_weight", "loss.weight"),
        ("lr", "optimizer.lr"),
        ("max_steps", "run.max_steps"),
        ("eval_size", "data.eval_size"),
        ("eval_data", "data.eval_source"),
        ("adam_betas", "optimizer.betas"),
    ],
)
def test_a_flat_key_of_release_0_1_is_refused_naming_its_key_now(tmp_path, old, new):
    """Removed in release 0.2: in a recipe and on the command line, one line naming the file (or the
    command line), the old key and the key that replaced it; never silently ignored."""
    recipe = tmp_path / "old.yaml"
    recipe.write_text(f"loss: del\n{old}: 1\n")
    with pytest.raises(ConfigError) as recipe_error:
        load_train_config(recipe)
    assert str(recipe_error.value) == f"{recipe}: key '{old}' was removed; use '{new}'"
    with pytest.raises(ConfigError) as override_error:
        load_train_config(None, [f"{old}=1"])
    assert str(override_error.value) == f"command line: key '{old}' was removed; use '{new}'"


def test_every_removed_key_names_a_key_that_exists():
    """A removed key's error must send the user to a key the configuration reads."""
    sections = typing.get_type_hints(TrainConfig)
    known = {f"{name}.{key}" for name, section in sections.items() for key in typing.get_type_hints(section)}
    assert TRAIN_ALIASES.removed and set(TRAIN_ALIASES.removed.values()) <= known
    assert set(SHORT_KEYS.items()) <= set(TRAIN_ALIASES.removed.items())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["optimizer.lerning_rate=1"], r"unknown key 'optimizer.lerning_rate' \(did you mean optimizer.min_lr_ratio"),
        (["optimizer.lr=fast"], "command line: optimizer.lr must be a number, got 'fast'"),
        (["run.max_steps=1.5"], "run.max_steps must be an integer, got 1.5"),
        (["data.packing=yes please"], "data.packing"),
        (["parallel.zero_stage=1"], "parallel.zero_stage must be one of 2, 3"),
        (["run.global_batch_size=10", "run.micro_batch_size=4"], "not a multiple of run.micro_batch_size"),
        (["parallel.offload=true", "parallel.zero_stage=2"], "offload needs parallel.zero_stage=3"),
        (["run.resume=/nonexistent/ckpt"], "run.resume: /nonexistent/ckpt"),
        (["lr"], "expected key=value"),
        (
            ["loss=foo"],
            "loss.name must be one of mle, mixce, emo, ntl_was, ntl_mse, dist2, del, number_level, smmd, ntil, "
            "got 'foo'",
        ),
        (["model=/nonexistent/dir"], "model.name /nonexistent/dir: no such file or directory"),
        (["data=./missing.jsonl"], "data.source ./missing.jsonl: no such file or directory"),
        (["data=synthetic:0"], "expected synthetic:N or synthetic:SET:N with N > 0"),
        (["run=3"], "run is a section"),
    ],
)
def test_bad_values_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config(None, overrides)


def test_bad_recipe_file_is_named(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("loss: del\nrun: {epochs: [1\n")
    with pytest.raises(ConfigError, match=f"{recipe}: not valid YAML"):
        load_train_config(recipe)
    recipe.write_text("optimizer: {warmup: 0.1}\n")
    with pytest.raises(ConfigError, match=f"{recipe}: unknown key 'optimizer.warmup'.*optimizer.warmup_ratio"):
        load_train_config(recipe)


def test_base_recipes_are_merged_first_and_loops_are_refused(tmp_path):
    (tmp_path / "base.yaml").write_text("loss: {name: del, weight: 0.1}\nrun: {seed: 7}\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nloss: {weight: 0.2}\n")
    config = load_train_config(tmp_path / "child.yaml")
    assert (config.loss.name, config.loss.weight, config.run.seed) == ("del", 0.2, 7)
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="chain loops back"):
        load_train_config(tmp_path / "a.yaml")


RELEASED = {  # recipe: (lambda, lr) of the released runs (DEL_SPEC.md)
    "qwen2.5-1.5b": (0.128, 5e-6),
    "qwen2.5-7b": (0.128, 5e-6),
    "deepseek-math-7b-instruct": (0.256, 5e-6),
    "codellama-7b": (0.01, 2e-5),
    "mistral-7b": (0.01, 5e-6),
}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_recipes(name):
    config = load_train_config(CONFIGS / f"{name}.yaml")
    assert (config.loss.name, config.loss.weight, config.optimizer.lr) == ("del", *RELEASED[name])
    assert config.data.source == "TIGER-Lab/MathInstruct" and config.run.epochs == 2 and config.data.max_length == 1500
    assert config.run.global_batch_size == 128 and config.optimizer.warmup_ratio == 0.03
    assert config.parallel.zero_stage == 3
    baseline = load_train_config(CONFIGS / f"{name}.yaml", ["loss=mle", "loss.weight="])
    assert (baseline.loss.name, baseline.loss.weight) == ("mle", None)


def test_every_training_recipe_loads_and_round_trips():
    # study-*.yaml configure recipes/study.py, numeric-bench*.yaml recipes/numeric_bench.py; _*.yaml are bases
    names = sorted(p.stem for p in CONFIGS.glob("*.yaml") if not p.stem.startswith(("study-", "numeric-bench", "_")))
    assert set(RELEASED) | {"tiny"} <= set(names)
    for name in names:
        config = load_train_config(CONFIGS / f"{name}.yaml")
        flat = [
            f"{section}.{key}={value}"
            for section, values in config_to_dict(config).items()
            for key, value in values.items()
            if not isinstance(value, (dict, list)) and value is not None
        ]
        assert load_train_config(None, flat) == config
