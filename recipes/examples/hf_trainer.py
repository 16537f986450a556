"""DEL from your own ``transformers.Trainer``: the few lines that turn it on, in a complete script.

    python recipes/examples/hf_trainer.py                      # SmolLM2-135M-Instruct, offline, CPU
    python recipes/examples/hf_trainer.py model=DIR steps=4 loss=ntl_was loss.weight=auto
    torchrun --nproc_per_node 8 recipes/examples/hf_trainer.py model=Qwen/Qwen2.5-1.5B \
        deepspeed=ds_configs/zero3.json

Keys (key=value; --help lists them): model, loss (loss.weight, loss.auto_ratio, loss.options),
steps, output_dir, deepspeed (del_core/integrations/example_cli.py).

``DELTrainer`` is ``Trainer`` with a del_core loss: it divides every micro-batch's loss by the
token AND digit counts of the whole optimizer step over all ranks (see docs/hf_trainer.md), and
logs ``ce``, ``aux``, ``digit_entropy`` and ``digit_acc`` beside ``loss``.
"""

import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, TrainingArguments

from del_core.console import filter_known_warnings
from del_core.integrations import DELTrainer
from del_core.integrations.example_cli import example_arguments, loss_line, print_auto_weight
from del_core.models import resolve_model

filter_known_warnings()


def arithmetic_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` prompt/answer pairs such as ("What is 12 + 30?", " 12 + 30 = 42.")."""
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 999), rng.randint(1, 999)) for _ in range(n)]
    return [{"prompt": f"What is {a} + {b}?\n", "answer": f"{a} + {b} = {a + b}."} for a, b in pairs]


def tokenize(row: dict[str, str], tokenizer) -> dict[str, list[int]]:
    """Input ids of prompt + answer + EOS; labels -100 on the prompt (the Trainer's convention:
    labels aligned with the inputs, the model shifts them)."""
    prompt = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + answer, "labels": [-100] * len(prompt) + answer}


def main() -> None:
    args = example_arguments(__doc__, "runs/hf-trainer-example")  # model= loss= loss.weight= steps= ...

    source = resolve_model(args.model)  # smollm2 / a .gguf file become a Hugging Face directory
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=args.steps,
        learning_rate=2e-5,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        deepspeed=args.deepspeed,
    )
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    rows = [tokenize(row, tokenizer) for row in arithmetic_rows(4 * args.steps)]
    trainer = DELTrainer(
        model=model,
        args=training_args,
        train_dataset=rows,
        data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True),  # pads labels with -100
        processing_class=tokenizer,  # the digit vocabulary is found from it
        loss=args.loss_spec,  # LossSpec(args.loss, weight=args.loss_weight): a name, a lambda or "auto"
    )
    print(loss_line(trainer))
    trainer.train()
    print_auto_weight(trainer)


if __name__ == "__main__":
    main()
