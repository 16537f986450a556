"""The held-out evaluations of one run, in the order the trainer asks for them: "before" the first
step, "during" every ``run.eval_every`` steps (teacher-forced only), "after" the last step; each
logged as it is made and kept, and at the end the console summary and the greedy answers problem
by problem (what :class:`HeldOutEvaluator` measures is in :mod:`.evaluator`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from del_core.data.prompting import PromptFormat
from del_core.data.splits import TrainingData
from del_core.models.sequence_attention import evaluation_attention
from del_core.parallel import ParallelDims
from del_core.training.config import TrainConfig
from del_core.training.heldout.evaluator import HeldOutEvaluator, HeldOutResult
from del_core.training.heldout.summary import answer_records, print_summary
from del_core.training.model_setup import RunTokenizer
from del_core.training.objective import CausalLMObjective
from del_core.training.records import EvalRecord
from del_core.training.reporting import Reporter, SilentReporter

LABELS = ("before", "during", "after")


@dataclass
class HeldOutHistory:
    """The run's evaluator and what it measured so far (on every rank; rank 0 logs and prints)."""

    evaluator: HeldOutEvaluator
    rows: Sequence[dict]  # the held-out rows (data.eval_rows), for the summary and the answers
    before: Optional[HeldOutResult] = None  # None in a resumed run: its first process measured it
    after: Optional[HeldOutResult] = None
    during: list[EvalRecord] = field(default_factory=list)  # the run.eval_every records of this process

    @classmethod
    def for_run(
        cls,
        config: TrainConfig,
        data: TrainingData,
        tokens: RunTokenizer,
        dims: ParallelDims,
        device: torch.device,
        synced_generation: bool,
        log: Callable[[str], None],
    ) -> HeldOutHistory:
        """The evaluations of a run of ``config`` on ``data``'s held-out set (``dims``: the final
        layout, groups included; ``synced_generation``: ZeRO-3 with several ranks, every rank runs
        every generate forward)."""
        if config.data.eval_generate and dims.tp > 1:
            log(
                "[eval] data.eval_generate is skipped with tp > 1 (generate needs full-vocabulary logits); "
                "evaluate the exported model with recipes/evaluate.py"
            )
        evaluator = HeldOutEvaluator(
            data.eval_rows,
            data.eval_examples,
            tokens.vocab,
            tokens.tokenizer,
            tokens.pad_id,
            config.run.micro_batch_size,
            config.data.eval_generate,
            config.data.max_new_tokens,
            dims,
            device,
            synced_generation=synced_generation,
            prompts=PromptFormat(config.data.prompt_format, tokens.tokenizer),
        )
        return cls(evaluator, data.eval_rows)

    def evaluate(
        self, objective: CausalLMObjective, step: int, label: str, reporter: Union[Reporter, SilentReporter]
    ) -> Optional[HeldOutResult]:
        """The ``label`` evaluation (one of :data:`LABELS`) at ``step``, logged through ``reporter``
        and kept; greedy answers except "during". None without held-out rows. Collective. Under
        sequence parallelism the model attends over whole sequences for it."""
        dims = self.evaluator.dims
        with evaluation_attention(objective.lm, enabled=dims.sp > 1):
            result = self.evaluator.evaluate(objective, step, label, generate=label != "during")
        if result is None:
            return None
        reporter.log(result.record)
        if label == "before":
            self.before = result
        elif label == "after":
            self.after = result
        else:
            self.during.append(result.record)
        return result

    def print_summary(self, log: Callable[[str], None]) -> None:
        """The held-out table (before, during, after) and the answers before -> after."""
        print_summary(self.before, self.after, self.rows, log, self.during)

    def answer_records(self) -> list[dict]:
        """The greedy answers before and after, one record per answered problem (none without
        answers; no before fields unless the same problems were answered before)."""
        if self.after is None or not self.after.answers:
            return []
        rows = self.rows[: len(self.after.answers)]
        before = self.before.answers if self.before is not None and len(self.before.answers) == len(rows) else []
        return answer_records(rows, before, self.after.answers)
