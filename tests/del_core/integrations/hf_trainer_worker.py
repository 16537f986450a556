"""Worker of test_hf_trainer.py: trains the tiny Qwen2 with ``DELTrainer`` (transformers.Trainer)
for a few steps and writes what the tests compare. One process, or under torch.distributed.run.

    python hf_trainer_worker.py SPEC.json

SPEC: ``{"model": DIR, "out": DIR, "rows": [{"input_ids": [...], "labels": [...]}, ...],
"sft_rows": [{"prompt", "completion"}, ...], "runs": [RUN, ...]}`` with RUN ``{"name", "micro",
"accumulation", "steps", "variant", "deepspeed", "loss_path", "weight", "lora", "sp", "fsdp",
"cpu_offload", "trainer", "compact"}``.
``variant`` is ``"global"`` (the integration as shipped) or a deliberately wrong normalisation:
``"per_micro_batch"`` (each micro-batch's digit term divided by its own digit count),
``"rank_local"`` (digits counted over this rank's window only, not all-reduced),
``"per_shard_spans"`` (under sequence parallelism, number spans computed on each shard instead of
the whole sequence) or ``"local_head_shard"`` (under FSDP2, the chunked loss scored against this
rank's shard of the LM head). ``weight`` is lambda (default 0.5; ``"auto"`` measures it);
``lora`` (default false) trains LoRA adapters (:func:`with_lora`). ``deepspeed`` is a DeepSpeed
config dict or null; ``sp`` (default 1) the DeepSpeed Ulysses sequence-parallel size of an
accelerate ``ParallelismConfig``; ``fsdp`` the TrainingArguments of FSDP (on the CPU through
:func:`allow_fsdp_on_cpu`), ``cpu_offload`` (default false) with FSDP2's CPU offload policy;
``trainer="sft"`` trains ``DELSFTTrainer`` (TRL) on the ``sft_rows`` instead; ``compact`` (default
false) the adapter's ``compact=True``. Rank 0 writes
``OUT/NAME.json`` (the Trainer's per-step logs), ``OUT/NAME.pt`` (the final weights, gathered
under ZeRO-3 and FSDP) and ``OUT/NAME.engine.json`` (the engines that trained,
:func:`engine_facts`, and the lambda of ``weight="auto"``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from del_core.integrations import DELTrainer, target_counts
from del_core.spans import IGNORE_INDEX

LR = 1e-3
SP_LENGTH = 48  # the fixed sequence length under sequence parallelism (the rows have 16 to 40 tokens)


class PerMicroBatchDigits(DELTrainer):
    """The defect to avoid: the digit term normalised by each micro-batch's own digit count."""

    def loss_normalisers(self, window, targets):
        return dataclasses.replace(window, num_digits=target_counts(targets, self.del_loss.vocab)[1])


class RankLocalDigits(DELTrainer):
    """The other defect: digits counted over this rank's window but not summed over the ranks."""

    def reduce_counts(self, local):
        return torch.stack([super().reduce_counts(local)[0], local[1]])


class PerShardSpans(DELTrainer):
    """The defect under sequence parallelism: the batches carry no whole-sequence spans, so the
    spans (and the digit counts) are computed on each shard after the cut."""

    def _whole_sequence_spans(self, collate):
        return dataclasses.replace(super()._whole_sequence_spans(collate), vocab=None)


class LocalHeadShard(DELTrainer):
    """The defect under FSDP2: the chunked loss scores against this rank's shard of the LM-head
    weight (FSDP2's row block of rank r, in place; the other ranks' rows zero) instead of the
    whole head. In one process the shard is the whole head."""

    def _head_weight(self, model):
        weight = super()._head_weight(model)
        rank, world = self.args.process_index, self.args.world_size
        rows = -(-weight.shape[0] // world)  # FSDP2's Shard(0): ceil(V / R) rows per rank
        mask = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
        mask[rank * rows : (rank + 1) * rows] = 1
        return weight * mask


VARIANTS = {
    "global": DELTrainer,
    "per_micro_batch": PerMicroBatchDigits,
    "rank_local": RankLocalDigits,
    "per_shard_spans": PerShardSpans,
    "local_head_shard": LocalHeadShard,
}

# Answers with 0 to 16 digits: consecutive pairs (the micro-batches) hold very different digit counts.
ANSWER_TEMPLATES = (
    "The colour is blue.",
    "It is {a}.",
    "The total is {b}{c}.{a}{b}.",
    "Nothing to compute here, sorry.",
    "{c}.{b}{c}{a} is close to pi, and {a}{a} is not.",
    "We get {b} apples.",
    "No number at all.",
    "Result: {c}{c}{b}{a}.",
)


def make_rows(tokenizer, n: int) -> list[dict]:
    """``n`` prompt + answer rows: the prompt's targets are -100, the answer and EOS are learned."""
    import random

    rng = random.Random(0)
    rows = []
    for i in range(n):
        numbers = {"a": rng.randint(1, 9), "b": rng.randint(10, 999), "c": rng.randint(1000, 99999)}
        prompt = tokenizer(f"Question {i}: tell me something.\nAnswer:", add_special_tokens=False)["input_ids"]
        answer = tokenizer(
            " " + ANSWER_TEMPLATES[i % len(ANSWER_TEMPLATES)].format(**numbers), add_special_tokens=False
        )
        answer_ids = answer["input_ids"] + [tokenizer.eos_token_id]
        rows.append({"input_ids": prompt + answer_ids, "labels": [IGNORE_INDEX] * len(prompt) + answer_ids})
    return rows


def make_sft_rows(n: int) -> list[dict]:
    """``n`` prompt-completion rows (additions whose sums have 1 to 7 digits) for TRL's SFTTrainer."""
    import random

    rng = random.Random(1)
    rows = []
    for i in range(n):
        a, b = rng.randint(0, 10 ** (1 + i % 6)), rng.randint(0, 999)
        rows.append({"prompt": f"What is {a} + {b}?", "completion": f" {a} + {b} = {a + b}."})
    return rows


def collate(pad_id: int):
    """Right padding: input ids with ``pad_id``, labels with -100, attention mask 0."""

    def call(rows: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        batch = {
            "input_ids": torch.full((len(rows), width), pad_id),
            "labels": torch.full((len(rows), width), IGNORE_INDEX),
            "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
        }
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            batch["input_ids"][i, :n] = torch.tensor(row["input_ids"])
            batch["labels"][i, :n] = torch.tensor(row["labels"])
            batch["attention_mask"][i, :n] = 1
        return batch

    return call


def training_arguments(out: Path, run: dict):
    """Sequential sampling (every layout sees the same global batches), constant LR, a log per step;
    TRL's SFTConfig (fp32, no completion-only flag beyond TRL's default) for ``trainer="sft"``."""
    from transformers import TrainingArguments

    config, extra = TrainingArguments, {}
    if run.get("trainer") == "sft":
        from trl import SFTConfig

        config, extra = SFTConfig, {"bf16": False}  # TRL's default is bf16 autocast, also on CPU
    return config(
        output_dir=str(out / run["name"]),
        per_device_train_batch_size=run["micro"],
        gradient_accumulation_steps=run["accumulation"],
        max_steps=run["steps"],
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        train_sampling_strategy="sequential",
        disable_tqdm=True,
        deepspeed=run.get("deepspeed"),
        parallelism_config=sequence_parallelism(run.get("sp", 1)),
        **run.get("fsdp", {}),
        **extra,
    )


def sequence_parallelism(sp: int):
    """accelerate's ParallelismConfig for DeepSpeed Ulysses with ``sp`` ranks (sdpa attention), or
    None for ``sp == 1``. Batches of a fixed length (:data:`SP_LENGTH`): DeepSpeed's dataloader
    adapter all-gathers the batches of the group, which gloo accepts only at equal sizes."""
    if sp == 1:
        return None
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import DeepSpeedSequenceParallelConfig

    handler = DeepSpeedSequenceParallelConfig(
        sp_seq_length_is_variable=False, sp_seq_length=SP_LENGTH, sp_attn_implementation="sdpa"
    )
    # the data-parallel replicas (ZeRO shards over them): the processes that sp does not take
    replicas = int(os.environ.get("WORLD_SIZE", "1")) // sp
    return ParallelismConfig(sp_size=sp, sp_backend="deepspeed", sp_handler=handler, dp_shard_size=replicas)


def join_deepspeed_process_group(args) -> None:
    """On CPU (``use_cpu=True``) accelerate starts a gloo group but not DeepSpeed's communication
    layer, so ``deepspeed.zero.Init`` in ``from_pretrained`` would see a world of 1 (on GPU
    accelerate does it). DeepSpeed then adopts the existing torch.distributed group."""
    import deepspeed

    assert args.world_size >= 1  # sets up the process group
    deepspeed.init_distributed(dist_backend="gloo")


def allow_fsdp_on_cpu() -> None:
    """Lift accelerate's gate that keeps FSDP from a CPU machine, inside this worker only.

    accelerate 1.16 (``AcceleratorState.__init__``, ``accelerate/state.py``) switches the distributed
    type to FSDP only in its branch for multi-device types (MULTI_GPU, MULTI_XPU, ...); under
    MULTI_CPU it drops the ``fsdp_plugin`` without a word and the Trainer trains with DDP. FSDP2
    itself (``fully_shard`` on a CPU device mesh over gloo) runs on the CPU, and it is the code under
    test, so after the state's own set-up this does what the skipped branch would have done: the
    distributed type becomes FSDP with the plugin the Trainer passed. Nothing else changes."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    init = AcceleratorState.__init__
    if getattr(init, "lifts_fsdp_gate", False):
        return

    def init_with_fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs):
        init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin

    init_with_fsdp_on_cpu.lifts_fsdp_gate = True
    AcceleratorState.__init__ = init_with_fsdp_on_cpu


def offload_without_pinning(args) -> None:
    """FSDP2's CPU offload policy (sharded parameters, gradients and the optimizer step on the CPU)
    with unpinned host memory. ``fsdp_config["cpu_offload"]`` gives accelerate's default
    ``CPUOffloadPolicy()``, which pins the shards; pinning needs an accelerator and fails on a
    CPU-only machine ("RuntimeError: Cannot access accelerator device when none is available" in
    ``FSDPParam._init_sharded_param``), so the plugin gets the policy with ``pin_memory=False``."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    args.fsdp_plugin_args["cpu_offload"] = CPUOffloadPolicy(pin_memory=False)


def train(spec: dict, run: dict) -> DELTrainer:
    """One training run as the spec says; returns the trainer after ``train()``."""
    from transformers import AutoModelForCausalLM

    from del_core.tokenizers import load_tokenizer

    out = Path(spec["out"])
    if run.get("fsdp"):
        allow_fsdp_on_cpu()
    args = training_arguments(out, run)
    if run.get("cpu_offload"):
        offload_without_pinning(args)  # before the model: under ZeRO-3 it is built partitioned
    if run.get("deepspeed"):
        join_deepspeed_process_group(args)
    tokenizer = load_tokenizer(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32, attn_implementation="sdpa")
    if run.get("lora"):
        model = with_lora(model)
    loss = {
        "loss": run.get("loss", "del"),
        "loss_weight": run.get("weight", 0.5),
        "loss_path": run.get("loss_path", "logits"),
        "compact": run.get("compact", False),
    }
    loss["loss_options"] = run.get("loss_options")
    if run.get("trainer") == "sft":
        from datasets import Dataset

        from del_core.integrations import DELSFTTrainer

        data = Dataset.from_list(spec["sft_rows"])  # prompt-completion rows: TRL tokenises and masks
        trainer = DELSFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, **loss)
    else:
        trainer = VARIANTS[run.get("variant", "global")](
            model=model,
            args=args,
            train_dataset=spec["rows"],
            data_collator=collate(tokenizer.pad_token_id or tokenizer.eos_token_id),
            processing_class=tokenizer,
            chunk_size=7,  # several chunks per micro-batch
            **loss,
        )
    trainer.train()
    return trainer


def with_lora(model):
    """``model`` with LoRA adapters (r 4, alpha 8) on the attention's q and v projections, seeded:
    every layout starts from the same adapters (B zero: the base model's outputs)."""
    from del_core.models.lora import LoraSettings, wrap_with_lora

    return wrap_with_lora(model, LoraSettings(4, 8.0, 0.0, ("q_proj", "v_proj")), seed=0, gradient_checkpointing=False)


def step_logs(trainer: DELTrainer) -> list[dict]:
    keys = ("loss", "ce", "aux", "digit_entropy", "digit_acc", "grad_norm")
    return [{k: h[k] for k in keys if k in h} | {"step": h["step"]} for h in trainer.state.log_history if "loss" in h]


def engine_facts(trainer: DELTrainer) -> dict:
    """The engine that trained, as the trainer and the model show it after training: ``fsdp`` and
    ``deepspeed`` (the Trainer's flags), ``fsdp_version`` and ``offload_policy`` (accelerate's
    plugin: 2 and ``OffloadPolicy`` or ``CPUOffloadPolicy`` under FSDP2; None and ``NoneType``
    without FSDP), ``dtensor_parameters`` (how many of the model's parameters are DTensors, as
    FSDP2 holds them between steps) and ``parameters``. A silent fallback to DDP shows here."""
    from torch.distributed.tensor import DTensor

    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
    parameters = list(trainer.model_wrapped.parameters())
    return {
        "fsdp": trainer.is_fsdp_enabled,
        "deepspeed": trainer.is_deepspeed_enabled,
        "fsdp_version": getattr(plugin, "fsdp_version", None),
        "offload_policy": type(getattr(plugin, "cpu_offload", None)).__name__,
        "dtensor_parameters": sum(isinstance(p, DTensor) for p in parameters),
        "parameters": len(parameters),
    }


def save(trainer: DELTrainer, out: Path, name: str) -> None:
    """Rank 0 writes the logs and the final weights (ZeRO-3 gathers them: a collective)."""
    weights = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    if trainer.args.process_index == 0:
        (out / f"{name}.json").write_text(json.dumps(step_logs(trainer)))
        auto = trainer.del_auto_weight
        engine = engine_facts(trainer) | {"sp": trainer.get_sp_size(), "auto_loss_weight": auto and auto.weight}
        (out / f"{name}.engine.json").write_text(json.dumps(engine))
        torch.save({k: v.detach().float().cpu() for k, v in weights.items()}, out / f"{name}.pt")


def end_sequence_parallelism(core_attention) -> None:
    """DeepSpeed keeps the sequence-parallel groups and its Ulysses attention (registered in place of
    transformers' sdpa) for the life of the process: undone, so that the next run starts afresh."""
    from deepspeed.runtime.sequence_parallel import parallel_state_sp
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    parallel_state_sp._release_sequence_parallel_groups()
    ALL_ATTENTION_FUNCTIONS["sdpa"] = core_attention


def main(path: str) -> None:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    spec = json.loads(Path(path).read_text())
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    for run in spec["runs"]:
        trainer = train(spec, run)
        save(trainer, Path(spec["out"]), run["name"])
        if run.get("sp", 1) > 1:
            end_sequence_parallelism(sdpa)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1])
