"""The export of a finished run: the full weights gathered once from the engine
(:meth:`del_core.engines.Backend.full_state`: ZeRO-3 partitions, AutoTP shards, FSDP2 shards),
written by rank 0 in Hugging Face format with the tokenizer and the recipe; with LoRA the
adapters merged into the base weights, and the adapter itself beside them.
The folder is replaced whole or not at all (:func:`del_core.models.save_hf` stages it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from del_core.config import config_to_yaml
from del_core.models import drop_tied_copies, merged_state_dict, save_adapter, save_hf
from del_core.parallel import ParallelDims, barrier
from del_core.training.config import TrainConfig
from del_core.training.objective import CausalLMObjective

RECIPE_FILE = "del_recipe.yaml"  # the run's config, beside the weights


@dataclass(frozen=True)
class ExportSource:
    """What the export reads: the engine's gathering of the full weights (``full_state(is_main)``:
    the objective's state dict on rank 0, None elsewhere; collective), the objective it trains, the
    PEFT wrapper with LoRA (else None), the tokenizer and the run's config."""

    full_state: Callable[[bool], Optional[dict]]
    objective: CausalLMObjective
    peft_model: Any
    tokenizer: Any
    config: TrainConfig


def export_model(source: ExportSource, target: Path, dims: ParallelDims, log: Callable[[str], None]) -> None:
    """Write ``target`` (``OUTPUT_DIR/final``) from ``source``. Collective."""
    started = time.time()
    state = source.full_state(dims.is_main)
    if dims.is_main:
        lm = source.objective.lm
        prefix = "lm."
        state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        write_adapter = None
        if source.peft_model is not None:
            write_adapter = _adapter_writer(source.peft_model, state)
            state = merged_state_dict(lm, state)
        drop_tied_copies(lm, state)
        recipe = {RECIPE_FILE: config_to_yaml(source.config)}
        save_hf(lm, state, source.tokenizer, target, recipe, write_adapter)
        adapter = f" (merged; LoRA adapter in {target / 'adapter'})" if write_adapter else ""
        log(f"[export] Hugging Face model written to {target}{adapter} in {time.time() - started:.1f} s")
    barrier()


def _adapter_writer(peft_model: Any, state: dict) -> Callable[[Path], None]:
    """Writes the PEFT adapter of the gathered ``state`` into ``<staging>/adapter``."""

    def write(staging: Path) -> None:
        save_adapter(peft_model, state, staging / "adapter")

    return write
