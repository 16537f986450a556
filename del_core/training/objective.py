"""The module DeepSpeed trains: a Hugging Face causal LM followed by a del_core loss.

The loss sits inside the engine's module so that everything it reads from the model (the LM-head
weight for the chunked path) is read during the module's own forward and backward, where ZeRO-3 can
gather it (the training entry point registers that weight as an external parameter).
"""

from __future__ import annotations

from typing import Optional

import torch

from del_core import LossOutput, NumberSpans, NumericLoss

# The named scalars the objective returns per micro-batch: the differentiable loss parts and the
# loss's detached metrics over the micro-batch (see del_core.LossOutput).
LOSS_PARTS = ("loss", "ce", "aux")
LOSS_METRICS = ("n_tokens", "n_digits", "digit_entropy", "digit_acc")


def as_named_tensors(out: LossOutput) -> dict[str, torch.Tensor]:
    """The loss result as a flat dict of scalar tensors (keys LOSS_PARTS + LOSS_METRICS): ZeRO-3's
    module hooks see the tensors of a dict (not those inside a dataclass); a metric the loss does
    not compute (no digit vocabulary) is 0."""
    zero = torch.zeros((), device=out.loss.device)
    named = {"loss": out.loss, "ce": out.ce, "aux": out.aux}
    named.update({name: out.metrics.get(name, zero).float().to(out.loss.device) for name in LOSS_METRICS})
    return named


class CausalLMObjective(torch.nn.Module):
    """``forward(input_ids, targets, ...) -> dict`` of named scalars, see :func:`as_named_tensors`.

    input_ids, targets [B, T] int64 (targets aligned: position t predicts targets[t], -100 ignored);
    attention_mask [B, T] or None; position_ids [B, T] (restart at 0 for each packed example; with
    ``attention_mask=None`` transformers then keeps attention inside each example).
    loss_path "logits": the model's logits [B, T, V] go to the loss; "chunked": the last hidden
    states and the LM-head weight go to ``loss.from_hidden``, ``chunk_size`` tokens at a time.
    num_tokens, num_digits: the global normalisers (0-dim tensors); spans: the targets'
    :class:`del_core.NumberSpans`, computed once where the batch was made.
    """

    def __init__(self, lm: torch.nn.Module, loss_fn: NumericLoss, loss_path: str = "logits", chunk_size: int = 1024):
        super().__init__()
        self.lm = lm
        # Not a submodule: its (frozen) buffers are no model state to partition, save or export.
        self._loss_fn = (loss_fn,)
        self.loss_path = loss_path
        self.chunk_size = chunk_size
        self.vocab_slice = None  # set by use_vocab_parallel_head under tensor parallelism
        self.tp_group = None
        # DeepSpeed's AutoTP installs its own vocab-parallel cross-entropy here when it makes the
        # LM head vocab-parallel; it is never called (the del_core loss reduces the shards).
        self.loss_function = None
        if loss_path == "chunked":
            head = lm.get_output_embeddings()
            if getattr(head, "bias", None) is not None:
                raise ValueError("loss_path=chunked needs an LM head without bias")
            if getattr(lm.config, "final_logit_softcapping", None):
                raise ValueError("loss_path=chunked does not support final_logit_softcapping models")

    @property
    def loss_fn(self) -> NumericLoss:
        return self._loss_fn[0]

    def set_loss_fn(self, loss_fn: NumericLoss) -> None:
        self._loss_fn = (loss_fn,)

    def use_vocab_parallel_head(self, vocab_slice, tp_group) -> None:
        """The LM head returns this rank's logit columns ``vocab_slice`` (a VocabSlice whose reducer
        all-reduces over ``tp_group``): the loss reduces partial sums instead of full logits."""
        self.vocab_slice = vocab_slice
        self.tp_group = tp_group

    def head_weight(self) -> torch.Tensor:
        return self.lm.get_output_embeddings().weight

    def forward(
        self,
        input_ids: torch.Tensor,
        targets: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        num_tokens: Optional[torch.Tensor] = None,
        num_digits: Optional[torch.Tensor] = None,
        spans: Optional[NumberSpans] = None,
    ) -> dict[str, torch.Tensor]:
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
        if self.loss_path == "logits":
            logits = self.lm(**inputs).logits
            out = self.loss_fn(logits, targets, num_tokens, num_digits, vocab_slice=self.vocab_slice, spans=spans)
            return as_named_tensors(out)
        hidden = self.lm.base_model(**inputs).last_hidden_state
        if self.tp_group is not None:
            from del_core.parallel import copy_to_tensor_parallel_region

            hidden = copy_to_tensor_parallel_region(hidden, self.tp_group)
        out = self.loss_fn.from_hidden(
            hidden,
            self.head_weight(),
            targets,
            num_tokens,
            num_digits,
            vocab_slice=self.vocab_slice,
            chunk_size=self.chunk_size,
            spans=spans,
        )
        return as_named_tensors(out)
