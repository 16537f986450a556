"""Fine-tune a Hugging Face causal LM with a del_core loss under DeepSpeed ZeRO-2/3.

    python recipes/train.py [RECIPE.yaml] [key=value ...]            # one process (CPU or one GPU)
    torchrun --nproc_per_node 8 recipes/train.py recipes/configs/qwen2.5-1.5b.yaml
    python recipes/train.py recipes/configs/tiny.yaml                 # the CPU main job (make train)

Keys: recipes/config.py. Outputs in OUTPUT_DIR: metrics.jsonl (every step, held-out evaluations
and a final record), tensorboard/, checkpoints/step_NNNNNN/ (resume=auto picks the newest complete
one), final/ (Hugging Face safetensors + tokenizer, loadable with from_pretrained).

Per optimizer step each rank runs its accumulation micro-batches; the loss of every micro-batch is
divided by the token and digit counts of the whole global batch (summed over micro-batches and
ranks first), so the update does not depend on how the global batch is split.
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import signal
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
import yaml

from del_core import DigitVocab, MultiDigitVocabularyError, build_loss, number_spans
from recipes import checkpoints
from recipes.config import ConfigError, TrainConfig, load_config, to_dict
from recipes.data import IGNORE_INDEX, DataError, Example, collate, encode_all, pack, read_source, shuffled
from recipes.deepspeed_config import accumulation_steps, build_ds_config
from recipes.heldout import answer_accuracy, greedy_answers, summarise, teacher_forced_sums
from recipes.modeling import attention_implementation, convert_gguf, load_model, resolve_source, save_hf
from recipes.objective import CausalLMObjective
from recipes.reporting import Reporter, SilentReporter
from recipes.schedule import StepPlan, lr_scheduler


RUN_STATUS = "run_status.json"  # {"status": "running" | "stopped" | "finished", "step": N}; launchers read it


# --- process group --------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_distributed(on_gpu: bool):
    """DeepSpeed's process group (gloo on CPU, nccl on GPU). Without a launcher: one process."""
    if not on_gpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    import deepspeed

    if on_gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    return deepspeed


@contextmanager
def local_main_first():
    """Run the body on local rank 0 first (downloads, conversions), then on the other ranks."""
    first = int(os.environ.get("LOCAL_RANK", 0)) == 0
    if not first:
        dist.barrier()
    yield
    if first:
        dist.barrier()


def _sum(values: list[float], device, group=None) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, group=group)
    return tensor.tolist()


def _max(value: float, device) -> float:
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def peak_memory_gb(on_gpu: bool) -> float:
    if on_gpu:
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


# --- data -----------------------------------------------------------------------------------
def prepare_data(config: TrainConfig, tokenizer, log):
    """(training items, held-out rows, held-out examples); items are Examples or Packed sequences."""
    rows = read_source(config.data, config.data_split, config.seed)
    if config.eval_data:
        eval_rows = read_source(config.eval_data, config.data_split, config.seed + 1)[: config.eval_size or None]
    elif config.data.startswith("synthetic:") and config.eval_size:
        eval_rows = read_source(f"synthetic:{config.eval_size}", seed=1_000_003 + config.seed)
    elif config.eval_size:
        held = shuffled(list(range(len(rows))), config.seed)[: config.eval_size]
        held_set = set(held)
        eval_rows = [rows[i] for i in held]
        rows = [row for i, row in enumerate(rows) if i not in held_set]
        log(f"[data] held out {len(eval_rows)} training rows for evaluation (set eval_data or eval_size=0 to change)")
    else:
        eval_rows = []
    examples, report = encode_all(rows, tokenizer, config.max_length)
    log(f"[data] {config.data}: {report.summary()}")
    if not examples:
        raise DataError(f"{config.data}: no example keeps any response token within max_length {config.max_length}")
    items = pack(shuffled(examples, config.seed), config.max_length) if config.packing else examples
    if config.packing:
        log(f"[data] packed {len(examples)} examples into {len(items)} sequences of <= {config.max_length} tokens")
    eval_examples, _ = encode_all(eval_rows, tokenizer, config.max_length)
    return items, eval_rows, eval_examples


def count_targets(batch: dict, vocab) -> list[float]:
    targets = batch["targets"]
    digits = number_spans(targets, vocab).is_digit.sum().item() if vocab is not None else 0
    return [float((targets != IGNORE_INDEX).sum()), float(digits)]


# --- evaluation -----------------------------------------------------------------------------
def gather_vocab_shards(local: torch.Tensor, vocab_slice, group) -> torch.Tensor:
    """Full-vocabulary logits [..., V] from every tensor-parallel rank's columns (evaluation only)."""
    sizes = [torch.zeros(1, dtype=torch.long, device=local.device) for _ in range(dist.get_world_size(group))]
    dist.all_gather(sizes, torch.tensor([local.shape[-1]], device=local.device), group=group)
    width = max(int(s) for s in sizes)
    padded = torch.nn.functional.pad(local.contiguous(), (0, width - local.shape[-1]))
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded, group=group)
    full = torch.cat([part[..., : int(size)] for part, size in zip(parts, sizes)], -1)
    assert full.shape[-1] == vocab_slice.vocab_size
    return full


def evaluate(objective, items, vocab, pad_id, micro, ctx) -> dict:
    """Teacher-forced held-out metrics; rows sharded over data-parallel ranks, every rank running
    the same number of forwards (ZeRO-3 gathers parameters collectively; tensor-parallel ranks
    see the same rows and gather their logit columns)."""
    rank, world = ctx["dp_rank"], ctx["dp"]
    device = ctx["device"]
    shard = list(items[rank::world])
    per_rank = math.ceil(len(items) / world)
    blank = Example(list(items[0].input_ids), [IGNORE_INDEX] * len(items[0].targets))
    shard += [blank] * (per_rank - len(shard))
    sums = torch.zeros(8, dtype=torch.float64, device=device)
    was_training = objective.training
    objective.eval()
    with torch.no_grad():
        for start in range(0, per_rank, micro):
            batch = {k: v.to(device) for k, v in collate(shard[start : start + micro], pad_id).items()}
            logits = objective.lm(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
            ).logits
            if objective.vocab_slice is not None:
                logits = gather_vocab_shards(logits, objective.vocab_slice, objective.tp_group)
            sums += teacher_forced_sums(logits, batch["targets"], vocab)
    objective.train(was_training)
    dist.all_reduce(sums, group=ctx["dp_group"])
    return summarise(sums.cpu())


def held_out_report(objective, eval_examples, eval_rows, vocab, tokenizer, config, ctx, label: str) -> dict:
    if not eval_examples:
        return {}
    result = evaluate(objective, eval_examples, vocab, ctx["pad_id"], config.micro_batch_size, ctx)
    if config.eval_generate and ctx["tp"] > 1:
        if label == "before" and ctx["rank"] == 0:
            print("[eval] eval_generate is skipped with tp > 1 (generate needs full-vocabulary logits); "
                  "evaluate the exported model with recipes/evaluate.py", flush=True)
    elif config.eval_generate:
        rows = eval_rows[: config.eval_generate]
        answers = greedy_answers(objective.lm, tokenizer, rows, config.max_new_tokens, ctx["device"],
                                 synced=ctx["zero3"] and ctx["world"] > 1)
        result["answer_acc"] = answer_accuracy(rows, answers)
        result["_answers"] = answers
    return result


# --- tensor parallelism ---------------------------------------------------------------------
def check_heads(model_config, tp: int) -> None:
    """AutoTP splits attention by heads: tp must divide the query and key-value head counts."""
    text = getattr(model_config, "text_config", None) or model_config
    heads = getattr(text, "num_attention_heads", None)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    for count, what in ((heads, "attention"), (kv_heads, "key-value")):
        if count is not None and count % tp:
            raise ConfigError(f"tp={tp} must divide the model's {count} {what} heads")


def attach_tensor_parallel(engine, objective, config: TrainConfig, options: dict, vocab, log):
    """After AutoTP sharded the model: point the loss at the vocab-parallel head's columns.
    Returns (data-parallel group, data-parallel rank)."""
    from deepspeed.utils import groups

    from del_core.losses.statistics import VocabSlice
    from del_core.parallel import DistributedReducer

    tp_group, dp_group = groups.get_tensor_model_parallel_group(), groups.get_data_parallel_group()
    head = objective.lm.get_output_embeddings()
    if not hasattr(head, "vocab_start_index"):
        raise RuntimeError(
            f"tp={config.tp}: AutoTP did not turn the LM head into a vocab-parallel layer "
            f"({type(head).__name__}); the loss needs local logit shards"
        )
    vocab_slice = VocabSlice(head.vocab_start_index, head.vocab_end_index, head.vocab_size, DistributedReducer(tp_group))
    objective.use_vocab_parallel_head(vocab_slice, tp_group)
    if config.loss == "emo":
        # The frozen cost embedding: keep this rank's rows only and release the full-vocabulary
        # copy (the statistics layer would slice a full one per call, holding all V rows).
        options["cost_embedding"] = options["cost_embedding"][vocab_slice.start : vocab_slice.end].clone()
        objective.set_loss_fn(build_loss("emo", vocab, **options))
    if config.loss_path == "chunked" and engine.zero_optimization_stage() == 3:
        raise ConfigError("loss_path=chunked with tp > 1 is supported with zero_stage=2 only")
    log(f"[tp] LM head columns [{vocab_slice.start}, {vocab_slice.end}) of {vocab_slice.vocab_size} on rank "
        f"{dist.get_rank()}; the loss all-reduces digit-restricted partial sums over the tensor-parallel group")
    return dp_group, groups.get_data_parallel_rank()


# --- checkpoints ----------------------------------------------------------------------------
def save_checkpoint(engine, config: TrainConfig, step: int, state: dict, rank: int, log) -> Path:
    root = checkpoints.checkpoint_root(config.output_dir)
    tag = checkpoints.tag_for(step)
    started = time.time()
    engine.save_checkpoint(str(root), tag=tag, save_latest=False)
    torch.save(torch.get_rng_state(), root / tag / f"rng_rank{rank}.pt")
    dist.barrier()  # every rank's shards are on disk
    if rank == 0:
        checkpoints.mark_complete(root / tag, {**state, "step": step})
        removed = checkpoints.prune(root, config.save_total_limit)
        log(f"[checkpoint] step {step} saved to {root / tag} in {time.time() - started:.1f} s"
            + (f"; removed {', '.join(p.name for p in removed)}" if removed else ""))
    dist.barrier()
    return root / tag


def resume_from(engine, config: TrainConfig, state: dict, rank: int, log) -> int:
    """Load the checkpoint that ``config.resume`` names; the step to continue from (0: fresh)."""
    if config.resume == "no":
        return 0
    root = checkpoints.checkpoint_root(config.output_dir)
    if config.resume == "auto":
        complete, incomplete = checkpoints.list_checkpoints(root)
        for path in incomplete:
            log(f"[resume] ignoring {path}: incomplete (no {checkpoints.MARKER})")
        if not complete:
            log(f"[resume] no complete checkpoint in {root}: starting from step 0")
            return 0
        path = complete[-1][1]
    else:
        path = Path(config.resume)
    saved = checkpoints.read_state(path)
    for key in ("tp", "num_items", "global_batch_size", "seed", "data", "packing", "max_length"):
        if saved.get(key) != state[key]:
            raise ConfigError(
                f"resume: {path} was written with {key}={saved.get(key)!r}, this run has {state[key]!r}; "
                "the data order would differ"
            )
    load_path, _ = engine.load_checkpoint(str(path.parent), tag=path.name)
    if load_path is None:
        raise RuntimeError(f"resume: DeepSpeed could not load {path}")
    rng = path / f"rng_rank{rank}.pt"
    if rng.is_file():
        torch.set_rng_state(torch.load(rng))
    log(f"[resume] continuing from {path} (step {saved['step']})")
    return int(saved["step"])


def drop_tied_copies(lm, state: dict) -> None:
    """Remove the output head's entry when the model ties it to the input embedding (some gathers,
    e.g. AutoTP's under ZeRO-2, return both); the two must hold the same values."""
    tied = getattr(lm, "_tied_weights_keys", None)
    if not isinstance(tied, dict) or not getattr(lm.config, "tie_word_embeddings", False):
        return
    for target, source in tied.items():
        if target in state and source in state:
            if not torch.equal(state[target], state[source]):
                raise RuntimeError(f"export: tied weights {target} and {source} differ")
            del state[target]


def export(engine, objective, tokenizer, config: TrainConfig, zero3: bool, rank: int, log) -> None:
    """Gather the full weights once and write OUTPUT_DIR/final in Hugging Face format."""
    started = time.time()
    if zero3 or config.tp > 1:
        # collective: gathers ZeRO-3 partitions and AutoTP shards; the full dict on rank 0
        state = engine._consolidated_16bit_state_dict()
    else:
        state = objective.state_dict() if rank == 0 else None
    if rank == 0:
        prefix = "lm."
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        drop_tied_copies(objective.lm, state)
        target = Path(config.output_dir) / "final"
        save_hf(objective.lm, state, tokenizer, target, {"del_recipe.yaml": yaml.safe_dump(to_dict(config))})
        log(f"[export] Hugging Face model written to {target} in {time.time() - started:.1f} s")
    dist.barrier()


# --- the run --------------------------------------------------------------------------------
class StopRequest:
    """SIGTERM or SIGUSR1 (slurm pre-emption, time limit) -> finish the step, write a checkpoint,
    set OUTPUT_DIR/run_status.json to "stopped" and exit 0 (launch/slurm requeues such runs)."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


def run(config: TrainConfig) -> dict:
    on_gpu = torch.cuda.is_available()
    deepspeed = init_distributed(on_gpu)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % config.tp:
        raise ConfigError(f"tp={config.tp} does not divide the world of {world} processes")
    dp = world // config.tp
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    reporter_log = print if rank == 0 else (lambda *a, **k: None)

    def log(text: str) -> None:
        reporter_log(text, flush=True)

    bf16 = config.precision == "bf16" or (config.precision == "auto" and on_gpu)
    dtype = torch.bfloat16 if bf16 else torch.float32
    use_ds_optimizer = config.optimizer == "deepspeed" or (config.optimizer == "auto" and on_gpu)
    ds_config = build_ds_config(config, dp, bf16, use_ds_optimizer)
    zero3 = ds_config["zero_optimization"].get("stage") == 3
    ga = accumulation_steps(config, dp)
    log(f"[run] {world} rank(s) on {'GPU' if on_gpu else 'CPU'} = tensor parallel {config.tp} x data parallel {dp}, "
        f"ZeRO-{ds_config['zero_optimization'].get('stage')}"
        f"{' + offload' if 'offload_optimizer' in ds_config['zero_optimization'] else ''}, "
        f"{'bf16' if bf16 else 'fp32'}; global batch {config.global_batch_size} = micro {config.micro_batch_size} "
        f"x accumulation {ga} x {dp} data-parallel rank(s)")

    from del_core.tokenizers import DEFAULT_CACHE

    cache_dir = Path(config.cache_dir) if config.cache_dir else DEFAULT_CACHE.parent
    source = resolve_source(config.model)
    tokenizer_source = resolve_source(config.tokenizer) if config.tokenizer else source
    with local_main_first():
        if source.endswith(".gguf"):
            source = str(convert_gguf(Path(source), cache_dir))
            tokenizer_source = source if not config.tokenizer else tokenizer_source
        from del_core.tokenizers import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_source, cache_dir / "tokenizers")
    if tokenizer.eos_token_id is None:
        raise ConfigError(f"tokenizer {tokenizer_source} has no EOS token")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    try:
        vocab = DigitVocab.from_tokenizer(tokenizer, name=str(tokenizer_source))
        log(f"[vocab] digits '0'..'9' = {list(vocab.digit_ids)}, '.' = {vocab.point_id}")
    except MultiDigitVocabularyError as err:
        if config.loss not in ("mle", "mixce", "emo"):
            raise
        vocab = None
        log(f"[vocab] no single-digit vocabulary ({err}); loss {config.loss} runs without digit metrics")

    items, eval_rows, eval_examples = prepare_data(config, tokenizer, log)
    plan = StepPlan(len(items), config.global_batch_size, config.micro_batch_size, dp, config.seed)
    total_steps = plan.total_steps(config.epochs, config.max_steps)
    log(f"[plan] {len(items)} sequences, {plan.steps_per_epoch} steps per epoch, {total_steps} steps")

    torch.manual_seed(config.seed)
    from transformers.integrations import HfDeepSpeedConfig

    init_config = ds_config
    if config.tp > 1:
        # transformers refuses its weight renaming under zero.Init when the config names tensor
        # parallelism. The model is built ZeRO-3-partitioned over the world;
        # deepspeed.initialize then applies AutoTP and re-partitions over data parallel.
        init_config = {k: v for k, v in ds_config.items() if k != "tensor_parallel"}
    hf_ds_config = HfDeepSpeedConfig(init_config)  # noqa: F841 - must stay alive: from_pretrained partitions under it
    attn = attention_implementation(config.attn_implementation, on_gpu)
    model = load_model(source, dtype, attn, config.gradient_checkpointing)
    log(f"[model] {source}: {type(model).__name__}, attention {attn}, gradient checkpointing "
        f"{'on' if config.gradient_checkpointing else 'off'}")

    if config.tp > 1:
        check_heads(model.config, config.tp)
    options = dict(config.loss_options)
    if config.loss == "emo":
        weight = model.get_output_embeddings().weight
        with deepspeed.zero.GatheredParameters([weight], enabled=zero3):
            options["cost_embedding"] = weight.detach().to(device=device, dtype=torch.float32).clone()
    loss_fn = build_loss(config.loss, vocab, weight=config.loss_weight, **options)
    objective = CausalLMObjective(model, loss_fn, config.loss_path, config.chunk_size)
    if zero3 and config.loss_path == "chunked" and config.tp == 1:
        # The loss reads the LM-head weight outside the head's own forward: ZeRO-3 must gather it
        # around the objective's forward and backward.
        deepspeed.zero.register_external_parameter(objective, objective.head_weight())

    params = [p for p in objective.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    optimizer = None
    if not use_ds_optimizer:
        optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.adam_betas, eps=config.adam_eps)

    def make_scheduler(opt):
        return lr_scheduler(opt, total_steps, config.warmup_ratio, config.min_lr_ratio)

    engine, _, _, scheduler = deepspeed.initialize(
        model=objective, optimizer=optimizer, model_parameters=groups, lr_scheduler=make_scheduler, config=ds_config
    )
    dp_group, dp_rank = None, rank
    if config.tp > 1:
        dp_group, dp_rank = attach_tensor_parallel(engine, objective, config, options, vocab, log)
    run_state = {
        "tp": config.tp, "num_items": len(items), "global_batch_size": config.global_batch_size, "seed": config.seed,
        "data": config.data, "packing": config.packing, "max_length": config.max_length,
        "total_steps": total_steps, "loss": config.loss,
    }
    start_step = resume_from(engine, config, run_state, rank, log)
    if rank == 0:
        checkpoints.write_json_atomic(output_dir / RUN_STATUS, {"status": "running", "step": start_step})
    ctx = {"rank": rank, "world": world, "device": device, "pad_id": pad_id, "zero3": zero3, "tp": config.tp,
           "dp": dp, "dp_rank": dp_rank, "dp_group": dp_group}

    reporter = (
        Reporter(output_dir, config.report_to, total_steps, start_step, output_dir.name, to_dict(config), config.wandb_project)
        if rank == 0 else SilentReporter()
    )
    log = reporter.write if rank == 0 else log
    results: dict = {}
    if start_step == 0 and eval_examples:
        results["before"] = held_out_report(objective, eval_examples, eval_rows, vocab, tokenizer, config, ctx, "before")
        reporter.log({"kind": "eval", "step": 0, **_numbers(results["before"])})

    stop = StopRequest()
    last: dict = {}
    step = start_step
    run_started = time.time()
    while step < total_steps:
        if config.fail_at_step and step + 1 == config.fail_at_step:
            log(f"[fail_at_step] exiting abruptly at the start of step {step + 1}")
            os._exit(17)
        started = time.time()
        batches = [
            {k: v.to(device) for k, v in collate([items[i] for i in micro], pad_id).items()}
            for micro in plan.micro_batches(step, dp_rank)
        ]
        local = [0.0, 0.0]
        for batch in batches:
            local = [a + b for a, b in zip(local, count_targets(batch, vocab))]
        # tensor-parallel ranks hold the same batch: the counts are summed over data parallel only
        num_tokens, num_digits = (torch.tensor(v, device=device) for v in _sum(local, device, dp_group))
        lr_used = scheduler.get_last_lr()[0] if scheduler is not None else config.lr
        sums = torch.zeros(7, dtype=torch.float64, device=device)
        for batch in batches:
            loss, ce, aux, metrics = engine(
                input_ids=batch["input_ids"], targets=batch["targets"],
                attention_mask=None if config.packing else batch["attention_mask"],
                position_ids=batch["position_ids"], num_tokens=num_tokens, num_digits=num_digits,
            )
            # Each micro-batch loss is already divided by the global counts: the gradient wanted is
            # the plain sum over micro-batches and data-parallel ranks, which DeepSpeed averages over.
            engine.backward(loss * dp, scale_wrt_gas=False)
            engine.step()
            metrics = metrics.double()
            n_dig = metrics[1]
            sums += torch.stack([
                loss.detach().double(), ce.detach().double(), aux.detach().double(),
                metrics[2] * n_dig, metrics[3] * n_dig, n_dig, batch["attention_mask"].sum().double(),
            ])
        dist.all_reduce(sums, group=dp_group)  # tensor-parallel ranks hold identical copies
        step += 1
        s = sums.tolist()
        elapsed = time.time() - started
        grad_norm = engine.get_global_grad_norm()
        last = {
            "kind": "train", "step": step, "loss": s[0], "ce": s[1], "aux": s[2],
            "digit_entropy": s[3] / s[5] if s[5] else None, "digit_acc": s[4] / s[5] if s[5] else None,
            "n_tokens": num_tokens.item(), "n_digits": num_digits.item(),
            "lr": lr_used,
            "grad_norm": float(grad_norm) if grad_norm is not None else None,
            "tokens_per_s": s[6] / elapsed, "step_time_s": elapsed,
            "peak_mem_gb": _max(peak_memory_gb(on_gpu), device),
        }
        if not math.isfinite(s[0]):
            raise FloatingPointError(f"step {step}: the loss is {s[0]}; stopping before the weights are saved")
        reporter.log(last, console=step % config.log_every == 0 or step == total_steps)
        reporter.advance(last)
        stop_now = _max(float(stop.requested), device) > 0
        if (config.save_every and step % config.save_every == 0) or (stop_now and step < total_steps):
            save_checkpoint(engine, config, step, run_state, rank, log)
        if stop_now and step < total_steps:
            log(f"[stop] signal received: checkpoint of step {step} written; resume with resume=auto")
            if rank == 0:
                checkpoints.write_json_atomic(output_dir / RUN_STATUS, {"status": "stopped", "step": step})
            reporter.close()
            dist.barrier()
            return {"stopped_at": step}
    train_time = time.time() - run_started

    if config.save_every and step % config.save_every:
        save_checkpoint(engine, config, step, run_state, rank, log)
    if eval_examples:
        results["after"] = held_out_report(objective, eval_examples, eval_rows, vocab, tokenizer, config, ctx, "after")
        reporter.log({"kind": "eval", "step": step, **_numbers(results["after"])})
    if config.export:
        export(engine, objective, tokenizer, config, zero3, rank, log)
    final = {"kind": "final", "step": step, "train_time_s": train_time,
             **{f"train_{k}": v for k, v in last.items() if k not in ("kind", "step")}}
    for label in ("before", "after"):
        final.update({f"{label}_{k}": v for k, v in _numbers(results.get(label, {})).items()})
    reporter.log(final, console=False)
    if rank == 0:
        print_learned(results, eval_rows, config, log)
        checkpoints.write_json_atomic(output_dir / RUN_STATUS, {"status": "finished", "step": step})
    reporter.close()
    return final


def _numbers(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def print_learned(results: dict, eval_rows, config: TrainConfig, log) -> None:
    """The held-out before/after table and a few greedy answers."""
    if "after" not in results:
        return
    keys = ("ce", "digit_acc", "digit_entropy", "number_acc", "answer_acc")
    log(f"\nHeld-out ({len(eval_rows)} rows; answer_acc on {config.eval_generate} greedy answers):")
    log("  " + f"{'':>8}" + "".join(f"{k:>15}" for k in keys if k in results["after"]))
    for label in ("before", "after"):
        if label in results:
            row = results[label]
            log("  " + f"{label:>8}" + "".join(f"{row[k]:15.4f}" for k in keys if k in row))
    after = results["after"].get("_answers")
    if after:
        before = results.get("before", {}).get("_answers")
        for i, row in enumerate(eval_rows[: min(3, len(after))]):
            log(f"\n  Q: {row['instruction']}\n  reference: {row['output'].splitlines()[-1]}")
            if before:
                log(f"  before:    {before[i].strip().splitlines()[-1] if before[i].strip() else '(empty)'}")
            log(f"  after:     {after[i].strip().splitlines()[-1] if after[i].strip() else '(empty)'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], usage="%(prog)s [RECIPE.yaml] [key=value ...]")
    parser.add_argument("recipe", nargs="?", help="a YAML recipe (recipes/configs/); omitted: the built-in defaults")
    parser.add_argument("overrides", nargs="*", help="key=value, parsed as YAML (e.g. loss=mle lr=2e-5)")
    args, unknown = parser.parse_known_args(argv)
    overrides = list(args.overrides)
    recipe = args.recipe
    if recipe and "=" in recipe and not recipe.endswith((".yaml", ".yml")):
        overrides, recipe = [recipe] + overrides, None
    # --key value / --key=value are accepted as well
    it = iter(unknown)
    for token in it:
        if token.startswith("--local_rank"):  # added by the deepspeed launcher; LOCAL_RANK is in the env
            if "=" not in token:
                next(it, None)
            continue
        if token.startswith("--") and "=" in token:
            overrides.append(token[2:])
        elif token.startswith("--"):
            overrides.append(f"{token[2:]}={next(it, '')}")
        else:
            parser.error(f"unexpected argument {token!r}")
    try:
        config = load_config(recipe, overrides)
        run(config)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
