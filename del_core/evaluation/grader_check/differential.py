"""Differential grading: the project's verdicts on a generated corpus against the construction labels
and against independent graders (:mod:`del_core.evaluation.grader_check.independent_graders`).

:func:`grade_items` scores every corpus item; :func:`agreement_table` counts, per benchmark and per
split (development forms / held-out forms), the outputs on which the project and each grader
disagree with the labels, and the project with each grader; :func:`disagreements_by_kind` groups
the project's disagreements with the labels by (form, label, verdict) with an example each.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

from del_core.evaluation.answers.extract import answer_from_text
from del_core.evaluation.answers.program_output import answer_from_program_output
from del_core.evaluation.answers.scoring import is_correct
from del_core.evaluation.grader_check.corpus import CorpusItem
from del_core.evaluation.grader_check.independent_graders import GRADERS
from del_core.evaluation.question import BENCHMARKS, Record


@dataclass(frozen=True)
class GradedItem:
    item: CorpusItem
    answer: object  # the project's extracted answer
    project: bool  # the project's verdict
    graders: dict = field(default_factory=dict)  # grader name -> verdict


def project_answer(item: CorpusItem, record: Record):
    """The answer the project extracts from an item (text or program output)."""
    if item.channel == "program":
        return answer_from_program_output(item.output, record.kind, record.choices)
    return answer_from_text(item.output, record.kind, record.choices, record.question)


def grade_items(
    items: Iterable[CorpusItem], records: dict[tuple[str, int], Record], graders: Sequence[str] = tuple(GRADERS)
) -> list[GradedItem]:
    """The project's and each named grader's verdict on every item."""
    graded = []
    for item in items:
        record = records[(item.benchmark, item.index)]
        answer = project_answer(item, record)
        verdicts = {name: GRADERS[name](item.output, record, item.channel) for name in graders}
        graded.append(GradedItem(item, answer, is_correct(answer, record), verdicts))
    return graded


@dataclass(frozen=True)
class AgreementRow:
    benchmark: str
    split: str  # "development" | "held-out"
    n: int
    project_vs_label: int  # outputs where the project's verdict differs from the label
    hedges: int
    hedges_scored_right: int
    grader_vs_label: dict  # grader -> disagreements with the label
    project_vs_grader: dict  # grader -> disagreements with the project

    @property
    def project_error(self) -> float:
        return self.project_vs_label / self.n if self.n else 0.0


def agreement_table(graded: Sequence[GradedItem]) -> list[AgreementRow]:
    """One row per (benchmark, split) present, benchmarks in the project's order."""
    groups: dict[tuple[str, str], list[GradedItem]] = defaultdict(list)
    for g in graded:
        groups[(g.item.benchmark, "held-out" if g.item.held_out else "development")].append(g)
    names = sorted({name for g in graded for name in g.graders})
    rows = []
    for benchmark in BENCHMARKS:
        for split in ("development", "held-out"):
            members = groups.get((benchmark, split))
            if not members:
                continue
            hedges = [g for g in members if g.item.label == "hedge"]
            rows.append(
                AgreementRow(
                    benchmark,
                    split,
                    len(members),
                    sum(g.project != g.item.expected for g in members),
                    len(hedges),
                    sum(g.project for g in hedges),
                    {n: sum(g.graders[n] != g.item.expected for g in members) for n in names},
                    {n: sum(g.graders[n] != g.project for g in members) for n in names},
                )
            )
    return rows


def disagreements_by_kind(graded: Sequence[GradedItem]) -> list[tuple[tuple, int, GradedItem]]:
    """(benchmark, form, label, project verdict), count and one example, most frequent first."""
    counts: Counter = Counter()
    example: dict[tuple, GradedItem] = {}
    for g in graded:
        if g.project != g.item.expected:
            key = (g.item.benchmark, g.item.form, g.item.label, g.project)
            counts[key] += 1
            example.setdefault(key, g)
    return [(key, count, example[key]) for key, count in counts.most_common()]


def markdown_table(rows: Sequence[AgreementRow]) -> str:
    """The agreement table as markdown: disagreements (count and %) with the labels, per grader."""
    names = sorted({n for row in rows for n in row.grader_vs_label})
    head = ["benchmark", "forms", "n", "project vs label", "hedges right"]
    head += [f"{n} vs label" for n in names] + [f"project vs {n}" for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.benchmark, row.split, str(row.n), f"{row.project_vs_label} ({100 * row.project_error:.1f}%)"]
        cells.append(f"{row.hedges_scored_right}/{row.hedges}")
        cells += [f"{row.grader_vs_label[n]} ({100 * row.grader_vs_label[n] / row.n:.1f}%)" for n in names]
        cells += [str(row.project_vs_grader[n]) for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_disagreements(graded: Sequence[GradedItem], held_out: bool, limit: Optional[int] = None) -> str:
    """The project's disagreements with the labels by kind, for one split, with an example each."""
    part = [g for g in graded if g.item.held_out == held_out]
    lines = []
    for (benchmark, form, label, verdict), count, example in disagreements_by_kind(part)[:limit]:
        tail = example.item.output.strip().splitlines()[-1][:90]
        lines.append(
            f"- {benchmark} / {form} / label {label}, project says {'right' if verdict else 'wrong'}: {count} "
            f"(e.g. index {example.item.index}, answer {example.answer!r}, output ends {tail!r})"
        )
    return "\n".join(lines) or "- none"


def markdown_grader_disagreements(graded: Sequence[GradedItem], limit: Optional[int] = None) -> str:
    """For each grader, where it and the project disagree, by (benchmark, form, label) and by who
    agrees with the label; the most frequent kinds first."""
    names = sorted({n for g in graded for n in g.graders})
    sections = []
    for name in names:
        counts: Counter = Counter()
        for g in graded:
            if g.graders[name] != g.project:
                side = "project" if g.project == g.item.expected else name
                counts[(g.item.benchmark, g.item.form, g.item.label, side)] += 1
        lines = [
            f"- {benchmark} / {form} / label {label}: {count}, {side} agrees with the label"
            for (benchmark, form, label, side), count in counts.most_common(limit)
        ]
        more = len(counts) - limit if limit is not None else 0
        if more > 0:
            lines.append(f"- ... {more} more kinds")
        sections.append(f"### project vs {name}\n\n" + ("\n".join(lines) or "- none"))
    return "\n\n".join(sections)


def run_corpus(
    data_dir, benchmarks: Sequence[str], problems: int, graders: Sequence[str] = tuple(GRADERS), seed: int = 0
) -> list[GradedItem]:
    """Build the corpus of ``problems`` records per benchmark and grade it."""
    from del_core.evaluation.benchmarks.files import load_benchmark
    from del_core.evaluation.grader_check.corpus import build_corpus

    graded = []
    for name in benchmarks:
        records = load_benchmark(name, data_dir)
        by_index = {(name, r.index): r for r in records}
        graded += grade_items(build_corpus(records, problems, seed), by_index, graders)
    return graded


def report(graded: Sequence[GradedItem]) -> str:
    """The markdown report: the agreement table, then the disagreements by kind for each split."""
    return "\n\n".join(
        [
            "# Differential grading\n\nDisagreements with the construction labels (count, % of outputs); "
            "'hedges right': hedges the project scored right.",
            markdown_table(agreement_table(graded)),
            "## Project vs labels, development forms\n\n" + markdown_disagreements(graded, held_out=False),
            "## Project vs labels, held-out forms\n\n" + markdown_disagreements(graded, held_out=True),
            "## Project vs each independent grader, by kind\n\n" + markdown_grader_disagreements(graded),
        ]
    )
