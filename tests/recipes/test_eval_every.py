"""run.eval_every through recipes/train.py (ZeRO-3, one process, tiny random Qwen2): held-out
records every N steps in metrics.jsonl, TensorBoard and on the console, without changing training.

The runs use LoRA with dropout 0.1, so training draws random numbers and depends on train mode: an
evaluation that left the model in eval mode, or consumed the training RNG stream, would change
the losses of the later steps. Two 4-step runs, about 35 s on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.shared import real_tokenizer
from helpers.training import make_tiny_qwen2, records, run_train, tiny_run, train_losses

pytestmark = pytest.mark.launches


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    model = make_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"), real_tokenizer("qwen2"))
    return tiny_run(
        model,
        tmp_path_factory.mktemp("cache"),
        **{
            "run.max_steps": 4,
            "data.eval_size": 4,
            "parallel.zero_stage": 3,
            "lora.enabled": "true",
            "lora.r": 4,
            "lora.dropout": 0.1,
            "optimizer.lr": 1e-2,
        },
    )


def _evals(out: Path) -> list[tuple[int, str]]:
    return [(r["step"], r["label"]) for r in records(out, "eval")]


def _tensorboard_steps(out: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    return [event.step for event in events.Scalars(tag)]


def test_eval_every_logs_held_out_metrics_without_changing_training(base, tmp_path):
    plain, evaluated = tmp_path / "plain", tmp_path / "evaluated"
    run_train(1, {**base, "run.output_dir": plain})
    proc = run_train(
        1, {**base, "run.eval_every": 2, "run.report_to": "jsonl,tensorboard", "run.output_dir": evaluated}
    )

    # Step 4 is the last: its evaluation is the "after" one (with generation when asked), not repeated.
    assert _evals(plain) == [(0, "before"), (4, "after")]
    assert _evals(evaluated) == [(0, "before"), (2, "during"), (4, "after")]
    during = records(evaluated, "eval")[1]
    assert during["ce"] > 0 and 0 <= during["digit_acc"] <= 1 and during["answer_acc"] is None
    assert "[eval] during, step 2: ce " in proc.stdout
    assert "    step 2" in proc.stdout  # its row in the held-out table of the summary
    assert _tensorboard_steps(evaluated, "eval/ce") == [0, 2, 4]

    # Training is unaffected: bit-identical losses, and the same final held-out CE.
    losses = train_losses(plain)
    assert sorted(losses) == [1, 2, 3, 4] and len(set(losses.values())) == 4
    assert train_losses(evaluated) == losses
    assert records(evaluated, "eval")[-1]["ce"] == records(plain, "eval")[-1]["ce"]
