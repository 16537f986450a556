"""How the Trainer adapter runs its model for a loss path (:class:`del_core.losses.CausalLMRun`).

The adapter calls the model as the Trainer wrapped it (DDP, DeepSpeed, FSDP2), so that the
wrapper's hooks run, with the batch's inputs minus its targets; what comes back is checked against
the targets before the loss sees it (:mod:`.setup_checks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from del_core.integrations.setup_checks import model_hidden_states, model_logits


class TrainerModelRun:
    """One batch's run of ``model`` (as the Trainer wrapped it) on ``inputs`` (the forward's keyword
    arguments), checked against ``targets`` [B, T]; ``model_name`` names the model in errors;
    ``read_head_weight`` reads the LM-head weight [V, H] the loss scores against (after the
    forward); ``read_head`` the LM-head module a compacted path runs on the gathered rows.
    ``outputs`` holds the forward's outputs once a path ran it."""

    def __init__(
        self,
        model: torch.nn.Module,
        inputs: Mapping[str, Any],
        targets: torch.Tensor,
        model_name: str,
        read_head_weight: Callable[[], torch.Tensor],
        read_head: Callable[[], torch.nn.Module],
    ):
        self.model, self.inputs, self.targets, self.model_name = model, inputs, targets, model_name
        self._read_head_weight, self._read_head = read_head_weight, read_head
        self.outputs: Any = None

    def logits(self) -> torch.Tensor:
        """The full forward's logits [B, T, V], one row per input position."""
        self.outputs = self.model(**self.inputs)
        return model_logits(self.outputs, self.targets, self.model_name)

    def hidden_states(self) -> torch.Tensor:
        """The last hidden states [B, T, H] of a forward that keeps the last position's logits only
        (``logits_to_keep=1``): the [B, T, V] logits are never made."""
        self.outputs = self.model(**self.inputs, output_hidden_states=True, logits_to_keep=1)
        return model_hidden_states(self.outputs, self.targets, self.model_name)

    def head_weight(self) -> torch.Tensor:
        return self._read_head_weight()

    def head(self, rows: torch.Tensor) -> torch.Tensor:
        """The LM-head module on ``rows`` [M, H] of the last hidden states: [M, V], through the
        module (ZeRO-3's hooks on it gather its weight, as in the model's forward)."""
        return self._read_head()(rows)
