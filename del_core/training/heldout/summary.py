"""The console summary of a finished run: the held-out table (before, during, after), the exact
answers before -> after with a paired 95% interval, and a few answers side by side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from del_core.confidence import Interval, t_interval
from del_core.evaluation.heldout.greedy_answers import score_heldout
from del_core.training.heldout.evaluator import HeldOutResult
from del_core.training.records import EvalRecord

_COLUMNS = ("ce", "digit_acc", "digit_entropy", "number_acc", "tf_answer_acc", "answer_acc")
_QUESTION_WIDTH = 58
_ANSWER_WIDTH = 12


def _table_row(label: str, record: EvalRecord, columns: Sequence[str]) -> str:
    """One line of the table; a metric the record lacks (no answers during training) shows "-"."""
    values = [getattr(record, c) for c in columns]
    return "  " + f"{label:>8}" + "".join(f"{v:15.4f}" if v is not None else f"{'-':>15}" for v in values)


@dataclass(frozen=True)
class AnswerChange:
    """Greedy exact answers of the same held-out problems before and after training."""

    n: int
    before_correct: int
    after_correct: int
    fixed: int  # wrong before, right after
    broken: int  # right before, wrong after
    difference: Interval  # after - before, in shares; paired t interval over the problems

    def describe(self) -> str:
        """ "before 9/96 (9.4%) -> after 29/96 (30.2%): +20.8 points, 95% CI [...]; ..."""
        half = self.difference.half_width
        mean = 100 * self.difference.mean
        interval = f", 95% CI [{mean - 100 * half:+.1f}, {mean + 100 * half:+.1f}]" if half is not None else ""
        return (
            f"before {self.before_correct}/{self.n} ({100 * self.before_correct / self.n:.1f}%) -> "
            f"after {self.after_correct}/{self.n} ({100 * self.after_correct / self.n:.1f}%): "
            f"{mean:+.1f} points{interval} (paired over the problems); "
            f"{self.fixed} fixed, {self.broken} broken"
        )


def answer_change(rows: Sequence[dict], before: Sequence[str], after: Sequence[str]) -> AnswerChange:
    """The change in exact answers over ``rows`` (one greedy output each before and after); at
    least one row."""
    before_scored, _ = score_heldout(rows, before)
    after_scored, _ = score_heldout(rows, after)
    was = [int(s["correct"]) for s in before_scored]
    now = [int(s["correct"]) for s in after_scored]
    return AnswerChange(
        n=len(rows),
        before_correct=sum(was),
        after_correct=sum(now),
        fixed=sum(1 for w, a in zip(was, now) if a > w),
        broken=sum(1 for w, a in zip(was, now) if a < w),
        difference=t_interval([a - w for w, a in zip(was, now)]),
    )


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _answer_cell(scored: dict) -> str:
    """The answer read from an output with a mark: "42 ok", "58 x", or "(none) x"."""
    answer = scored["answer"] if scored["answer"] is not None else "(none)"
    return _clip(f"{answer} {'ok' if scored['correct'] else 'x'}", _ANSWER_WIDTH)


def side_by_side(rows: Sequence[dict], before: Sequence[str], after: Sequence[str]) -> list[str]:
    """Lines of a table: question, reference answer, the answer read from the output before and
    after (marked ok / x); ``before`` may be empty (no column then)."""
    after_scored, _ = score_heldout(rows, after)
    before_scored = score_heldout(rows, before)[0] if before else []
    head = f"  {'question':<{_QUESTION_WIDTH}} {'reference':>{_ANSWER_WIDTH}}"
    head += f" {'before':>{_ANSWER_WIDTH}}" if before_scored else ""
    lines = [head + f" {'after':>{_ANSWER_WIDTH}}"]
    for i, row in enumerate(rows):
        line = f"  {_clip(row['instruction'], _QUESTION_WIDTH):<{_QUESTION_WIDTH}}"
        line += f" {_clip(str(after_scored[i]['gold']), _ANSWER_WIDTH):>{_ANSWER_WIDTH}}"
        line += f" {_answer_cell(before_scored[i]):>{_ANSWER_WIDTH}}" if before_scored else ""
        lines.append(line + f" {_answer_cell(after_scored[i]):>{_ANSWER_WIDTH}}")
    return lines


def answer_records(rows: Sequence[dict], before: Sequence[str], after: Sequence[str]) -> list[dict]:
    """One record per greedy-answered held-out problem (OUTPUT_DIR/heldout_answers.jsonl): the
    question, the reference answer, and each output with the answer read from it and whether it is
    right; ``before`` may be empty (no before fields then)."""
    records = [{"index": i, "question": row["instruction"]} for i, row in enumerate(rows)]
    for label, outputs in (("before", before), ("after", after)):
        for record, scored in zip(records, score_heldout(rows, outputs)[0] if outputs else []):
            record["reference"] = scored["gold"]
            record[label] = scored["output"]
            record[f"{label}_answer"], record[f"{label}_correct"] = scored["answer"], scored["correct"]
    return records


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "(empty)"


def print_summary(
    before: Optional[HeldOutResult],
    after: Optional[HeldOutResult],
    rows: Sequence[dict],
    log: Callable[[str], None],
    during: Sequence[EvalRecord] = (),
    shown: int = 8,
) -> None:
    """The held-out table (``during``: the run.eval_every records, one row each, "step N"); with
    greedy answers, the exact answers before -> after, ``shown`` problems side by side, and the
    full last line of the first one's outputs."""
    if after is None:
        return
    columns = [c for c in _COLUMNS if getattr(after.record, c) is not None]
    log(f"\nHeld-out ({len(rows)} rows; answer_acc on {len(after.answers)} greedy answers):")
    log("  " + f"{'':>8}" + "".join(f"{c:>15}" for c in columns))
    if before is not None:
        log(_table_row("before", before.record, columns))
    for record in during:
        log(_table_row(f"step {record.step}", record, columns))
    log(_table_row("after", after.record, columns))
    if not after.answers:
        return
    answered = rows[: len(after.answers)]
    before_answers = before.answers if before is not None and len(before.answers) == len(answered) else []
    if before_answers:
        log(f"\nExact answers: {answer_change(answered, before_answers, after.answers).describe()}")
    log(f"\nGreedy answers to the first {min(shown, len(answered))} held-out problems:")
    for line in side_by_side(answered[:shown], before_answers[:shown], after.answers[:shown]):
        log(line)
    log(f"\n  Q: {answered[0]['instruction']}")
    if before_answers:
        log(f"  before: {_last_line(before_answers[0])}")
    log(f"  after:  {_last_line(after.answers[0])}")
