"""The Trainer adapter's loss paths that read the LM-head weight, under DeepSpeed ZeRO-3.

The chunked loss path (any :class:`del_core.losses.LossPath` with ``reads_head_weight``) scores
the last hidden states against the LM-head weight [V, H] after the model's forward has returned,
when ZeRO-3 has already partitioned that weight again (each rank holds 1/R of it).
:class:`ChunkedLossHost` runs the loss as a module of the trained model instead: attached to the
model before the Trainer hands it to ``deepspeed.initialize``, it carries ZeRO-3's module hooks,
and the head weight is registered as its external parameter, so ZeRO-3 gathers the whole weight
for the loss's forward, releases it after, gathers it again for the loss's backward, and
reduce-scatters its gradient into the partitioned gradient as it does for any module's parameter.
The [B, T, V] logits are never held (the model's forward keeps the last position's logits only).
"""

from __future__ import annotations

from typing import Optional

import torch

from del_core.engines import deepspeed as ds
from del_core.integrations.setup_checks import UnsupportedSetupError, head_weight
from del_core.losses import LossCalls, LossOutput, LossPath
from del_core.spans import NumberSpans

HOST_NAME = "del_chunked_loss"  # the host's name among the model's submodules
LOSS_PARTS = ("loss", "ce", "aux")


class ChunkedLossHost(torch.nn.Module):
    """``forward(output, targets, num_tokens, num_digits, spans, path=, calls=) -> dict``: the loss
    of ``path`` (:meth:`del_core.losses.LossPath.score`) on ``output`` (the path's model output,
    e.g. the hidden states [B, T, H]) against the LM-head weight of ``model``, as named tensors
    (ZeRO-3's hooks see the tensors of a dict, not those of a dataclass): ``loss``, ``ce``, ``aux``
    and ``metric/<name>`` for each of the loss's metrics.

    Holds no parameter or buffer of its own (the model's state dict is unchanged); ``model`` is
    kept outside the module tree (it is the host's parent)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self._model = (model,)

    def forward(
        self,
        output: torch.Tensor,
        targets: torch.Tensor,
        num_tokens: Optional[torch.Tensor] = None,
        num_digits: Optional[torch.Tensor] = None,
        spans: Optional[NumberSpans] = None,
        *,
        path: LossPath,
        calls: LossCalls,
    ) -> dict[str, torch.Tensor]:
        # The weight is read here, inside the host's forward: whole, gathered by ZeRO-3's pre-forward hook.
        out = path.score(
            calls,
            output,
            targets,
            num_tokens,
            num_digits,
            head_weight=lambda: head_weight(self._model[0]),
            spans=spans,
        )
        named = {name: getattr(out, name) for name in LOSS_PARTS}
        named.update({f"metric/{name}": value for name, value in out.metrics.items()})
        return named


def loss_output(named: dict[str, torch.Tensor]) -> LossOutput:
    """The :class:`del_core.LossOutput` of a :class:`ChunkedLossHost` result."""
    metrics = {name.removeprefix("metric/"): value for name, value in named.items() if name.startswith("metric/")}
    return LossOutput(named["loss"], named["ce"], named["aux"], metrics)


def attach_chunked_loss_host(model: torch.nn.Module) -> ChunkedLossHost:
    """A :class:`ChunkedLossHost` added to ``model`` as its submodule :data:`HOST_NAME`, with the
    LM-head weight registered as the host's ZeRO-3 external parameter. Call before
    ``deepspeed.initialize`` wraps ``model`` (the Trainer does that in ``train()``)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.nn.Parameter):
        raise UnsupportedSetupError(f"loss_path='chunked': {type(model).__name__} has no LM-head weight parameter")
    host = ChunkedLossHost(model)
    model.add_module(HOST_NAME, host)
    ds.register_external_weight(host, weight)
    return host
