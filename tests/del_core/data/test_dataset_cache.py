"""The tokenised-data cache (del_core.data.dataset_cache) against the in-memory reference path
(del_core.data.splits.prepare_training_data), on the real SmolLM2 tokenizer: the same items, held-out
rows and batches of every (step, rank); a second load reads the cache without tokenising; a changed
file, tokenizer or max_length makes a new entry; two local ranks share one entry."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

import datasets
import pytest

from del_core.data import DataError, collate
from del_core.data import dataset_cache as cache_module
from del_core.data.dataset_cache import DataRequest, prepare_cached_training_data
from del_core.data.splits import prepare_training_data
from del_core.data.synthetic import make_problems
from del_core.training.schedule import StepPlan
from helpers.torchrun import torchrun_command

WORKER = Path(__file__).with_name("cache_worker.py")
CHAT_ROW = {
    "messages": [
        {"role": "system", "content": "Answer with the number."},
        {"role": "user", "content": "What is 7 times 6?"},
        {"role": "assistant", "content": "7 * 6 = 42"},
        {"role": "user", "content": "Plus 1?"},
        {"role": "assistant", "content": "The answer is 43."},
    ]
}


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def data_file(tmp_path) -> Path:
    """240 Alpaca rows and 20 conversations (every 13th row)."""
    rows: list[dict] = make_problems(240, seed=11)
    for i in range(0, 260, 13):
        rows.insert(i, CHAT_ROW)
    return write_rows(tmp_path / "mixed.jsonl", rows)


def reference(request: DataRequest, tokenizer):
    r = request
    fields = (r.source, r.split, r.eval_source, r.eval_size, r.max_length, r.packing, r.seed)
    return prepare_training_data(*fields, tokenizer, print, r.prompt_format)


def assert_same_data(new, old, seed: int, ranks: int = 2) -> None:
    """Same items, held-out set, and collated micro-batches of every rank for every step of an epoch."""
    assert len(new.items) == len(old.items)
    assert [new.items[i] for i in range(len(new.items))] == list(old.items)
    assert new.eval_rows == old.eval_rows and new.eval_examples == old.eval_examples
    plan = StepPlan(len(old.items), 8, 2, ranks, seed)
    for step in range(plan.steps_per_epoch):
        for rank in range(ranks):
            for micro in plan.micro_batches(step, rank):
                a, b = collate([new.items[i] for i in micro], 0), collate([old.items[i] for i in micro], 0)
                assert all((getattr(a, k) == getattr(b, k)).all() for k in ("input_ids", "targets", "position_ids"))


@pytest.mark.parametrize(
    "prompt_format, packing, eval_size", [("chat", False, 12), ("chat", True, 0), ("alpaca", True, 12)]
)
def test_cached_data_equals_the_in_memory_path(tmp_path, data_file, smollm2, prompt_format, packing, eval_size):
    source = data_file
    if prompt_format == "alpaca":  # multi-turn conversations have no Alpaca form
        source = write_rows(tmp_path / "alpaca.jsonl", make_problems(200, seed=4))
    request = DataRequest(str(source), "train", None, eval_size, 96, packing, 5, prompt_format)
    old = reference(request, smollm2)
    logs: list[str] = []
    new = prepare_cached_training_data(request, smollm2, logs.append, tmp_path / "cache")
    assert_same_data(new, old, request.seed)
    assert any("truncated" in line for line in logs)  # max_length 96 cuts some of them


@pytest.mark.launches
def test_several_tokenising_processes_give_the_same_data(tmp_path, data_file, smollm2, monkeypatch):
    monkeypatch.setattr(cache_module, "MIN_ROWS_PER_PROCESS", 50)
    request = DataRequest(str(data_file), "train", None, 8, 128, False, 2, "chat")
    logs: list[str] = []
    new = prepare_cached_training_data(request, smollm2, logs.append, tmp_path / "cache", num_proc=2)
    assert any("with 2 process(es)" in line for line in logs)
    assert_same_data(new, reference(request, smollm2), request.seed)


def test_a_second_load_reads_the_cache_without_tokenising(tmp_path, data_file, smollm2, monkeypatch):
    request = DataRequest(str(data_file), "train", None, 8, 128, False, 2, "chat")
    first_logs: list[str] = []
    first = prepare_cached_training_data(request, smollm2, first_logs.append, tmp_path / "cache")
    assert any(line.startswith("[data] cache miss") for line in first_logs)

    def no_map(*args, **kwargs):
        raise AssertionError("Dataset.map called on a cache hit")

    monkeypatch.setattr(datasets.Dataset, "map", no_map)
    logs: list[str] = []
    second = prepare_cached_training_data(request, smollm2, logs.append, tmp_path / "cache")
    assert logs[0].startswith("[data] cache hit")
    assert [second.items[i] for i in range(len(second.items))] == [first.items[i] for i in range(len(first.items))]
    assert first_logs[-1] == logs[-1]  # the same encoding report on a hit


def entry_of(logs: list[str]) -> str:
    return next(line.split()[-1] for line in logs if line.startswith(("[data] cache hit", "[data] cache miss")))


def test_a_changed_file_tokenizer_or_max_length_makes_a_new_entry(tmp_path, data_file, smollm2):
    cache = tmp_path / "cache"
    request = DataRequest(str(data_file), "train", None, 0, 128, False, 2, "chat")

    def load(req, tokenizer=smollm2):
        logs: list[str] = []
        data = prepare_cached_training_data(req, tokenizer, logs.append, cache)
        return data, logs

    _, logs = load(request)
    base = entry_of(logs)
    assert entry_of(load(request)[1]) == base  # unchanged: a hit
    # max_length
    data, logs = load(replace(request, max_length=64))
    assert logs[0].startswith("[data] cache miss") and entry_of(logs) != base
    # the tokenizer: one more token in the vocabulary
    larger = copy.deepcopy(smollm2)
    larger.add_tokens(["<extra_digit_token>"])
    _, logs = load(request, larger)
    assert logs[0].startswith("[data] cache miss") and entry_of(logs) != base
    # the file: the same size, other content (and a later modification time)
    text = data_file.read_text()
    data_file.write_text(text.replace("What is 7 times 6?", "What is 7 times 9?"))
    stat = data_file.stat()
    os.utime(data_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    data, logs = load(request)
    assert logs[0].startswith("[data] cache miss") and entry_of(logs) != base
    assert [data.items[i] for i in range(len(data.items))] == list(reference(request, smollm2).items)


def test_bad_rows_and_missing_chat_templates_fail_before_an_entry_exists(tmp_path, data_file, smollm2):
    cache = tmp_path / "cache"
    alpaca = DataRequest(str(data_file), "train", None, 0, 128, False, 2, "alpaca")
    with pytest.raises(DataError, match=r"mixed\.jsonl: row 1: a conversation of turns"):
        prepare_cached_training_data(alpaca, smollm2, print, cache)
    plain = copy.deepcopy(smollm2)
    plain.chat_template = None
    with pytest.raises(DataError, match="needs a tokenizer with a chat template"):
        prepare_cached_training_data(replace(alpaca, prompt_format="chat"), plain, print, cache)
    assert list(cache.iterdir()) == []  # no entry, and the failed build's staging directory is removed


@pytest.mark.launches
def test_two_local_ranks_share_one_entry_and_get_the_in_memory_batches(tmp_path, data_file, smollm2):
    """Two processes (torch.distributed.run, gloo): local rank 0 builds, rank 1 waits and hits; both
    read the same entry, and each rank's micro-batches equal the in-memory path's."""
    request = DataRequest(str(data_file), "train", None, 8, 128, True, 7, "chat")
    smollm2.save_pretrained(str(tmp_path / "tokenizer"))
    (tmp_path / "request.json").write_text(json.dumps(asdict(request)))
    inputs = (tmp_path / "tokenizer", tmp_path / "request.json", tmp_path / "cache", tmp_path / "out")
    command = torchrun_command(2, WORKER, *inputs)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"out.{rank}.json").read_text()) for rank in range(2)]
    assert ranks[0]["logs"][0].startswith("[data] cache miss") and ranks[1]["logs"][0].startswith("[data] cache hit")
    assert entry_of(ranks[0]["logs"]) == entry_of(ranks[1]["logs"])
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]) == 1

    from cache_worker import GLOBAL_BATCH, MICRO_BATCH, rank_batches  # beside this module (pytest's rootdir path)

    old = reference(request, smollm2)
    plan = StepPlan(len(old.items), GLOBAL_BATCH, MICRO_BATCH, 2, request.seed)
    for rank, result in enumerate(ranks):
        assert result["batches"] == rank_batches(old.items, plan, rank, smollm2.eos_token_id)
        assert result["eval_rows"] == old.eval_rows
        assert result["eval_examples"] == [asdict(e) for e in old.eval_examples]
