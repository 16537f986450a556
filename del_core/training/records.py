"""What a training run writes to ``OUTPUT_DIR/metrics.jsonl``: one JSON object per line, each the
fields of one of the records below plus ``kind`` (``train``, ``eval`` or ``final``) and ``time``
(seconds since the reporter started). These dataclasses ARE the schema; readers (the study, tests,
users' notebooks) parse lines back with :func:`read_metrics`.

Units: losses in nats per token (the run's global normalisers), entropies in nats, accuracies as
shares in [0, 1], memory in GB (1e9 bytes), times in seconds, ``step`` in optimizer steps done.
"""

from __future__ import annotations

import dataclasses
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


MetricsRecord = Union[TrainRecord, EvalRecord, FinalRecord]
_KINDS = {"train": TrainRecord, "eval": EvalRecord, "final": FinalRecord}


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
