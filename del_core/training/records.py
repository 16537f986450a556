"""What a training run writes to ``OUTPUT_DIR/metrics.jsonl``: one JSON object per line, each the
fields of one of the records below plus ``kind`` (``train``, ``eval`` or ``final``) and ``time``
(seconds since the reporter started). These dataclasses ARE the schema; readers (the study, tests,
users' notebooks) parse lines back with :func:`read_metrics`.

Units: losses in nats per token (the run's global normalisers), entropies in nats, accuracies as
shares in [0, 1], memory in GB (1e9 bytes), times in seconds, ``step`` in optimizer steps done.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from del_core.data.jsonl import read_jsonl


@dataclass
class TrainRecord:
    """One optimizer step, summed over its micro-batches and the data-parallel ranks."""

    step: int
    loss: float  # ce + aux
    ce: float
    aux: float  # what the loss adds to CE (lambda-weighted digit term, MixCE/EMO difference)
    digit_entropy: Optional[float]  # mean over digit targets of the ten-digit distribution's entropy
    digit_acc: Optional[float]  # share of digit targets whose argmax over the ten digits is right
    n_tokens: float  # target tokens of the step (the CE normaliser)
    n_digits: float  # digit targets of the step (the digit-term normaliser)
    lr: float  # the learning rate the step used
    grad_norm: Optional[float]
    tokens_per_s: float  # attended input tokens of all ranks per second of the step
    step_time_s: float
    peak_mem_gb: float  # the largest peak over ranks (GPU allocated, or CPU max RSS)
    kind: str = "train"


@dataclass
class EvalRecord:
    """Held-out metrics, teacher-forced over the whole held-out set (``answer_acc``: greedy answers)."""

    step: int
    label: str  # "before" (step 0), "during" (every run.eval_every steps; no answer_acc) or "after" (the last step)
    ce: float
    digit_acc: float
    digit_entropy: float
    number_acc: float  # share of numbers (maximal digit/point spans) with every digit argmax-right
    tokens: float
    digits: float
    numbers: float
    tf_answer_acc: Optional[float] = None  # share of rows whose last number is right, teacher-forced
    answers: Optional[float] = None  # rows scored teacher-forced (None in records written before it existed)
    answer_acc: Optional[float] = None  # share of greedy answers whose number equals the reference's
    kind: str = "eval"


@dataclass
class FinalRecord:
    """The end of a finished run: the last step's record and the held-out results."""

    step: int
    train_time_s: float  # wall time of the training loop
    last: Optional[TrainRecord]
    before: Optional[EvalRecord]
    after: Optional[EvalRecord]
    kind: str = "final"


@dataclass
class ResumeRecord:
    """A resume that changed identity keys on purpose (``run.resume_override``): from step
    ``step + 1`` on, the run computes with the new values."""

    step: int  # the checkpoint's step
    checkpoint: str
    overrides: dict[str, list]  # key -> [checkpoint's value, new value]
    kind: str = "resume"


MetricsRecord = Union[TrainRecord, EvalRecord, FinalRecord, ResumeRecord]
_KINDS = {"train": TrainRecord, "eval": EvalRecord, "final": FinalRecord, "resume": ResumeRecord}


def record_to_json(record: MetricsRecord) -> dict[str, Any]:
    return dataclasses.asdict(record)


def record_from_json(row: dict[str, Any]) -> MetricsRecord:
    """The record a metrics.jsonl line holds (unknown fields, e.g. ``time``, are ignored)."""
    kind = row.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"metrics record of unknown kind {kind!r}")
    cls = _KINDS[kind]
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in row.items() if k in names}
    if cls is FinalRecord:
        values["last"] = TrainRecord(**values["last"]) if values.get("last") else None
        for label in ("before", "after"):
            values[label] = EvalRecord(**values[label]) if values.get(label) else None
    return cls(**values)


def read_metrics(path: Union[str, Path], kind: Optional[str] = None) -> list[MetricsRecord]:
    """The records of a metrics.jsonl file (or of ``OUTPUT_DIR/metrics.jsonl`` for a directory),
    of one ``kind`` when given; [] when the file does not exist."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        return []
    return [record_from_json(row) for row in read_jsonl(path) if kind is None or row.get("kind") == kind]


def _kept(row: dict[str, Any], step: int) -> bool:
    """Whether a record belongs to the run up to ``step``: everything logged by then except the
    end of a run (its final record and "after" evaluation), which a resumed run writes again."""
    if row.get("kind") == "final" or (row.get("kind") == "eval" and row.get("label") == "after"):
        return False
    return isinstance(row.get("step"), int) and row["step"] <= step


def cut_back(path: Union[str, Path], step: int) -> int:
    """Rewrite the metrics file ``path`` (atomically: readers see the old or the new file) to the
    records of the run up to ``step`` (step 0: none), so that a run resumed from ``step`` never logs
    a step twice; a torn last line is dropped. Returns the number of records removed."""
    path = Path(path)
    if not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if step > 0 and isinstance(row, dict) and _kept(row, step):
            kept.append(line)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    os.replace(staging, path)
    return len(lines) - len(kept)
