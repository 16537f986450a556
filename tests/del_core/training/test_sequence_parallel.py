"""Sequence parallelism in training (``parallel.sp=N``, DeepSpeed Ulysses): the ranks of a group
share each micro-batch, the number spans and the step's counts come from the whole sequences, and
each rank trains its contiguous shard. CPU, gloo, a tiny random Qwen2 with the real Qwen2 tokenizer,
on rows of long numbers, so that numbers run across the shard cuts (checked on the very batches).

Every run is compared with a single-process run (sp=1, accumulation 4) on the same global batch:
step losses to 1e-5 and the exported weights to fp32 round-off; DEL with sp 2 x dp 2 (ZeRO-3) and
sp 4 (ZeRO-2), MLE with packing, held-out evaluation and greedy generation under sp 2 (ZeRO-2), NTIL
and ntloss's number-level loss (whole numbers summed over the group) under sp 2 (ZeRO-2).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from helpers.sequence_parallel import numbers_across_cuts
from helpers.shared import real_tokenizer
from helpers.training import LazyRuns, assert_same_run, make_tiny_qwen2, records, tiny_run

pytestmark = [pytest.mark.launches, pytest.mark.slow]

RTOL = 1e-5


def _number(rng: random.Random) -> str:
    return f"{rng.randrange(10 ** rng.randint(3, 9))}.{rng.randrange(10 ** rng.randint(1, 6))}"


@pytest.fixture(scope="module")
def number_rows(tmp_path_factory) -> Path:
    """40 alpaca rows whose answers are mostly long numbers (one digit per Qwen2 token)."""
    rng = random.Random(0)
    rows = []
    for _ in range(40):
        a, b = _number(rng), _number(rng)
        answer = f"{a} + {b} = {float(a) + float(b):.6f}; check {_number(rng)} {_number(rng)}"
        rows.append({"instruction": f"Add {a} and {b}.", "input": "", "output": answer})
    path = tmp_path_factory.mktemp("numbers") / "numbers.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    # 4 query and 2 key-value heads: sp=4 replicates each key-value head over 2 ranks
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"), kv_heads=2)


@pytest.fixture(scope="module")
def base(tiny_model, number_rows, tmp_path_factory) -> dict:
    overrides = {"data": number_rows, "data.max_length": 96, "run.export": "true", "parallel.zero_stage": 3}
    # optimizer.eps: see test_tensor_parallel.py (Adam's update then follows the gradient's scale)
    return tiny_run(tiny_model, tmp_path_factory.mktemp("cache"), **overrides, **{"optimizer.eps": 1e-3})


PACKED_MLE = {
    "loss": "mle",
    "data.packing": "true",
    "data.eval_size": 6,
    "data.eval_generate": 2,
    "data.max_new_tokens": 8,
}


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory) -> LazyRuns:
    return LazyRuns(base, tmp_path_factory.mktemp)


def _step_batches(overrides: dict):
    """The collated micro-batches (with whole-sequence spans) of steps 1-3 of a run, as the trainer makes them."""
    from del_core import DigitVocab
    from del_core.data.tokenized import collate
    from del_core.tokenizers import load_tokenizer
    from del_core.training import load_train_config
    from del_core.training.schedule import StepPlan
    from del_core.training.trainer import training_data

    config = load_train_config(None, [f"{k}={v}" for k, v in overrides.items()])
    tokenizer = load_tokenizer(Path(config.model.name))
    vocab = DigitVocab.from_tokenizer(tokenizer)
    items = training_data(config, tokenizer, lambda *_: None).items
    run = config.run
    plan = StepPlan(len(items), run.global_batch_size, run.micro_batch_size, 1, run.seed)
    for step in range(3):
        for micro in plan.micro_batches(step, 0):
            yield collate([items[i] for i in micro], tokenizer.eos_token_id).with_spans(vocab)


@pytest.mark.parametrize("packing", ["false", "true"])
def test_the_training_batches_have_numbers_across_the_cuts(base, packing, tmp_path):
    overrides = {**base, "data.packing": packing, "run.output_dir": tmp_path}
    batches = list(_step_batches(overrides))
    for parts in (2, 4):
        assert sum(numbers_across_cuts(batch.spans, parts) for batch in batches) >= 4, parts


@pytest.mark.parametrize(
    "name, nproc, sp, extra",
    [("sp2_dp2_zero3", 4, 2, {}), ("sp4_zero2", 4, 4, {"parallel.zero_stage": 2})],
)
def test_sequence_parallel_equals_single_process(runs, name, nproc, sp, extra):
    reference = runs("sp1", 1)
    out = runs(name, nproc, **{"parallel.sp": sp}, **extra)
    log = runs.procs(name).stdout
    assert f"[run] {nproc} rank(s) on CPU = sequence parallel {sp} (Ulysses" in log
    assert f"x data parallel {nproc // sp}, ZeRO-{extra.get('parallel.zero_stage', 3)}" in log
    assert_same_run(out, reference, RTOL, grad_norm=True)


def test_packed_sequences_and_evaluation_under_sequence_parallelism(runs):
    """MLE on packed rows (position ids restart in a row, no mask), sp 2 with ZeRO-2: the same
    steps and weights as one process, the same held-out records and greedy answers."""
    reference = runs("sp1_packed_mle", 1, **PACKED_MLE)
    out = runs("sp2_packed_mle", 2, **PACKED_MLE, **{"parallel.sp": 2, "parallel.zero_stage": 2})
    assert "= sequence parallel 2 (Ulysses" in runs.procs("sp2_packed_mle").stdout
    assert_same_run(out, reference, RTOL, grad_norm=True)
    got, expected = records(out, "eval"), records(reference, "eval")
    assert [r["label"] for r in got] == [r["label"] for r in expected] == ["before", "after"]
    for a, b in zip(got, expected):
        assert math.isclose(a["ce"], b["ce"], rel_tol=RTOL) and a["tokens"] == b["tokens"], (a, b)
    answers = (out / "heldout_answers.jsonl").read_text()
    assert answers == (reference / "heldout_answers.jsonl").read_text() and answers


def test_ntil_under_sequence_parallelism_equals_single_process(runs):
    """NTIL scores whole numbers (its digit runs, their whole-number errors, per-sequence means
    and the step's CE / term ratio) and draws Gumbel noise: at sp 2 (ZeRO-2) each number cut
    between the two ranks is summed over the group, and the run takes the single process's steps."""
    ntil = {"loss": "ntil", "parallel.zero_stage": 2}
    reference = runs("sp1_ntil", 1, **ntil)
    out = runs("sp2_ntil", 2, **ntil, **{"parallel.sp": 2})
    assert "= sequence parallel 2 (Ulysses" in runs.procs("sp2_ntil").stdout
    assert_same_run(out, reference, RTOL, grad_norm=True)


def test_number_level_under_sequence_parallelism_equals_single_process(runs):
    """ntloss's NumberLevelLoss with ``float_level`` (a point between digits joins one number, so
    the numbers are long and many cross the cut) at sp 2 (ZeRO-2): each number's value and error
    are summed over the group and the run takes the single process's steps."""
    number_level = {"loss": "number_level", "loss.options": "{float_level: true}", "parallel.zero_stage": 2}
    reference = runs("sp1_number_level", 1, **number_level)
    out = runs("sp2_number_level", 2, **number_level, **{"parallel.sp": 2})
    assert "= sequence parallel 2 (Ulysses" in runs.procs("sp2_number_level").stdout
    assert all(r["aux"] > 0 for r in records(out))
    assert_same_run(out, reference, RTOL, grad_norm=True)


def test_compacted_ntil_under_sequence_parallelism_equals_single_process(runs):
    """loss.compact at sp 2: each rank runs the LM head and NTIL on the scored positions of its own
    shard (found on the host), the numbers cut between the ranks still summed over the group: the
    single process's full-logits steps."""
    ntil = {"loss": "ntil", "parallel.zero_stage": 2}
    reference = runs("sp1_ntil", 1, **ntil)
    out = runs("sp2_ntil_compact", 2, **ntil, **{"parallel.sp": 2, "loss.compact": "true"})
    log = runs.procs("sp2_ntil_compact").stdout
    assert "= sequence parallel 2 (Ulysses" in log and "[loss] compacted" in log
    assert_same_run(out, reference, RTOL, grad_norm=True)
