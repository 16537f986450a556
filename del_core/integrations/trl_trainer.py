"""TRL's ``SFTTrainer`` with a del_core loss. Importing this module needs ``trl`` (``pip install trl``).

``SFTTrainer.compute_loss`` scores the tokens with TRL's fused, chunked LM head, which never builds
the logits. :class:`DELSFTTrainer` replaces that method with the mixin's: the model runs its plain
forward (full logits) and the del_core loss takes them. Everything else of ``SFTTrainer`` (dataset
preparation, chat templates, completion-only / assistant-only masks, packing, padding-free
batches with their ``position_ids``) is unchanged. TRL's own entropy / token-accuracy metrics are
not computed (they came from the fused head); ``ce``, ``aux``, ``digit_entropy`` and ``digit_acc``
are logged instead.
"""

from __future__ import annotations

from trl import SFTTrainer

from del_core.integrations.hf_trainer import DELTrainerMixin


class DELSFTTrainer(DELTrainerMixin, SFTTrainer):
    """TRL's ``SFTTrainer`` training with a del_core loss (see :class:`DELTrainerMixin`)."""
