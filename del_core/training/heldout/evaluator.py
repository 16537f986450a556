"""Held-out measurements during training (before the first step, every ``run.eval_every`` steps,
after the last).

Teacher-forced metrics (:mod:`del_core.evaluation.heldout.teacher_forced`) over the held-out examples,
sharded over data-parallel ranks with every rank running the same number of forwards (ZeRO-3
gathers parameters collectively; tensor-parallel ranks see the same rows and gather their logit
columns); and optionally greedy answers to the first ``generate`` rows, scored by the project's one
answer reader (:func:`del_core.evaluation.heldout.greedy_answers.answer_accuracy`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from del_core.data.prompting import ALPACA_FORMAT, PromptFormat
from del_core.data.tokenized import Example, TokenBatch
from del_core.engines.runtime import rng_devices
from del_core.evaluation.generation import generate_greedy
from del_core.evaluation.heldout.greedy_answers import answer_accuracy
from del_core.evaluation.heldout.teacher_forced import score_examples, summarise
from del_core.parallel import ParallelDims, gather_vocab_shards, sum_named
from del_core.spans import IGNORE_INDEX
from del_core.training.objective import CausalLMObjective
from del_core.training.records import EvalRecord
from del_core.vocab import DigitVocab


@dataclass
class HeldOutResult:
    """An evaluation's record and its greedy answers (empty when none were generated)."""

    record: EvalRecord
    answers: list[str]


@dataclass
class HeldOutEvaluator:
    rows: Sequence[dict]
    examples: Sequence[Example]
    vocab: Optional[DigitVocab]
    tokenizer: Any
    pad_id: int
    micro_batch_size: int
    generate: int  # rows answered greedily (0: none; skipped under tensor parallelism)
    max_new_tokens: int
    dims: ParallelDims
    device: torch.device
    synced_generation: bool  # ZeRO-3 with several ranks: every rank runs every generate forward
    prompts: PromptFormat = ALPACA_FORMAT  # data.prompt_format: the prompts training continues

    def _shard(self) -> list[Example]:
        """This data-parallel rank's examples, padded with blank ones to the same count on every rank."""
        shard = list(self.examples[self.dims.dp_rank :: self.dims.dp])
        per_rank = math.ceil(len(self.examples) / self.dims.dp)
        blank = Example(list(self.examples[0].input_ids), [IGNORE_INDEX] * len(self.examples[0].targets))
        return shard + [blank] * (per_rank - len(shard))

    @torch.no_grad()
    def _teacher_forced(self, objective: CausalLMObjective) -> dict[str, float]:
        def logits_of(batch: TokenBatch) -> torch.Tensor:
            lm_output = objective.lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
            logits = lm_output.logits
            if objective.vocab_slice is None:
                return logits
            return gather_vocab_shards(logits, objective.vocab_slice.vocab_size, objective.tp_group)

        scores = score_examples(logits_of, self._shard(), self.micro_batch_size, self.pad_id, self.vocab, self.device)
        return sum_named(scores.sums, self.device, self.dims.dp_group)

    def _answers(self, objective: CausalLMObjective) -> list[str]:
        rows = self.rows[: self.generate]
        prompts = [self.prompts.row_prompt(row) for row in rows]
        return generate_greedy(
            objective.lm,
            self.tokenizer,
            prompts,
            self.max_new_tokens,
            self.device,
            batch_size=max(len(prompts), 1),
            synced_gpus=self.synced_generation,
        )

    def evaluate(
        self, objective: CausalLMObjective, step: int, label: str, generate: bool = True
    ) -> Optional[HeldOutResult]:
        """The held-out record at ``step`` (``label`` before/during/after; greedy answers only with
        ``generate``); None without held-out rows. Collective (every rank calls it).

        Training is left as it was: the model runs in eval mode and gets its train/eval mode back,
        and the RNG (CPU and this device) is forked, so an evaluation between steps consumes
        nothing of the training stream (dropout masks of later steps are unchanged).
        """
        if not self.examples:
            return None
        was_training = objective.training
        objective.eval()
        try:
            with torch.random.fork_rng(devices=rng_devices(self.device)):
                metrics = summarise(self._teacher_forced(objective))
                answers = self._answers(objective) if generate and self.generate and self.dims.tp == 1 else []
        finally:
            objective.train(was_training)
        answer_acc = answer_accuracy(self.rows[: len(answers)], answers) if answers else None
        record = EvalRecord(step=step, label=label, answer_acc=answer_acc, **dataclasses.asdict(metrics))
        return HeldOutResult(record, answers)
