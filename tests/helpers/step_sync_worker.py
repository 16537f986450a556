"""Worker of tests/del_core/training/test_step_host_syncs.py: one Trainer in a fresh process (one
rank, CPU, DeepSpeed on gloo), so that the process group, DeepSpeed's globals and the trainer's
signal handlers never touch the pytest process.

    python tests/helpers/step_sync_worker.py MODEL_DIR WORK_DIR

prints one JSON object (the last line of stdout):

* ``step``: the would-be host syncs (:mod:`helpers.host_syncs`) of one ``train_step()`` +
  ``maybe_checkpoint()`` after a warm-up step (the loss caches its digit columns on the first
  call), as ``{"events": [[kind, origin, origin_file], ...], "host_batches": [...]}``; the events
  raised while :meth:`Trainer._micro_batches` collates the step's batches and
  :meth:`Trainer._rank_part` cuts this rank's part of each (its scored positions under
  ``loss.compact``) on the host are listed apart (``host_batches``): on CPU the counter cannot
  tell host tensors from device tensors, and those methods work on host memory only (their
  batches move to the device afterwards);
* ``bad_label``: the error one out-of-range label id gives, and how many micro-batches reached the
  engine before it (``{"error": type, "message": str, "engine_calls": int}``);
* ``compact_step``: the same as ``step``, of a step of the same trainer with ``loss.compact``
  switched on (the objective's path compacted; the batches carry their scored positions);
* ``stop``: what ``maybe_checkpoint()`` returns after a step during which a stop was requested;
* ``modes``: the modules of the set-up objective not in training mode (``eval_mode_modules``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers.host_syncs import SyncLog, count_host_syncs  # noqa: E402
from helpers.training import tiny_run  # noqa: E402

BAD_ID = 10**7  # far beyond any vocabulary


def build_trainer(model_dir: Path, work_dir: Path):
    """A set-up Trainer of a 5-step run with gradient accumulation 2 (global batch 4 = micro 2 x 2)."""
    from del_core.training import load_train_config
    from del_core.training.trainer import Trainer

    overrides = tiny_run(
        model_dir,
        work_dir / "cache",
        **{
            "run.global_batch_size": 4,
            "run.max_steps": 7,
            "run.output_dir": str(work_dir / "run"),
            "run.report_to": "none",
        },
    )
    trainer = Trainer(load_train_config(None, [f"{k}={v}" for k, v in overrides.items()]))
    trainer.setup()
    return trainer


def counted_step(trainer) -> dict:
    """The events of one train_step() + maybe_checkpoint(), host batch preparation apart."""
    host_ranges: list[tuple[int, int]] = []

    def marked(log: SyncLog, prepare):
        def wrapper(*args, **kwargs):
            start = len(log.events)
            batches = prepare(*args, **kwargs)
            host_ranges.append((start, len(log.events)))
            return batches

        return wrapper

    with count_host_syncs() as log:
        trainer._micro_batches = marked(log, trainer._micro_batches)
        trainer._rank_part = marked(log, trainer._rank_part)
        trainer.train_step()
        trainer.maybe_checkpoint()
    del trainer._micro_batches, trainer._rank_part
    host = {i for start, end in host_ranges for i in range(start, end)}
    rows = [[e.kind, e.origin, e.origin_file] for e in log.events]
    return {
        "events": [row for i, row in enumerate(rows) if i not in host],
        "host_batches": [row for i, row in enumerate(rows) if i in host],
    }


def compacted(trainer) -> None:
    """``trainer`` as if set up with ``loss.compact=true``: its objective's path compacted, and its
    micro-batches made with their scored positions (the trainer reads the key per step)."""
    from del_core.losses import CompactedPath

    trainer.config.loss.compact = True
    trainer.objective.path = CompactedPath(trainer.objective.path)


def bad_label_step(trainer) -> dict:
    """One label id out of range in the next step's data: the error, and the engine calls before it."""
    first = trainer.plan.micro_batches(trainer.step, trainer.dims.dp_rank)[0][0]
    trainer.data.items = list(trainer.data.items)  # cached items are read-only views: corrupt a list copy
    item = trainer.data.items[first]
    position = next(i for i, t in enumerate(item.targets) if t != -100)
    saved = item.targets[position]
    item.targets[position] = BAD_ID
    engine, calls = trainer.engine, []

    def spy(**inputs):
        calls.append(1)
        return engine(**inputs)

    trainer.engine = spy
    try:
        trainer.train_step()
        result = {"error": None, "message": "", "engine_calls": len(calls)}
    except Exception as err:  # noqa: BLE001 - the test judges the type
        result = {"error": type(err).__name__, "message": str(err), "engine_calls": len(calls)}
    finally:
        trainer.engine = engine
        item.targets[position] = saved
    result.update(bad_id=BAD_ID, position=position)
    return result


def stop_step(trainer) -> dict:
    trainer.stop.requested = True
    trainer.train_step()
    return {"stopped": trainer.maybe_checkpoint(), "step": trainer.step}


def main(model_dir: str, work_dir: str) -> None:
    from del_core.parallel import destroy

    trainer = build_trainer(Path(model_dir), Path(work_dir))
    try:
        # before any step or evaluation: every module of the model trains in training mode
        report_modes = {"eval_mode_modules": [n for n, m in trainer.objective.named_modules() if not m.training]}
        trainer.train_step()  # warm-up
        trainer.maybe_checkpoint()
        report = {"step": counted_step(trainer), "modes": report_modes}
        compacted(trainer)
        trainer.train_step()  # warm-up of the compacted path
        report["compact_step"] = counted_step(trainer)
        report["stop"] = stop_step(trainer)
        report["bad_label"] = bad_label_step(trainer)  # last: an error inside a step may leave DeepSpeed mid-step
    finally:
        trainer.cleanup()
        destroy()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    main(*sys.argv[1:3])
