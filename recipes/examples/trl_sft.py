"""DEL from TRL's ``SFTTrainer``: prompt-completion data, TRL's masking, the del_core loss.

    python recipes/examples/trl_sft.py                         # SmolLM2-135M-Instruct, offline, CPU
    python recipes/examples/trl_sft.py model=DIR steps=4 loss=dist2
    accelerate launch --num_processes 8 recipes/examples/trl_sft.py model=Qwen/Qwen2.5-1.5B \
        deepspeed=ds_configs/zero3.json

Keys (key=value; --help lists them): model, loss (loss.weight, loss.auto_ratio, loss.options),
steps, output_dir, deepspeed (del_core/integrations/example_cli.py).

``DELSFTTrainer`` is ``SFTTrainer`` whose loss is a del_core loss on the model's full logits, with
the token and digit counts of the whole optimizer step over all ranks (docs/hf_trainer.md). TRL
prepares the data as usual (here: the prompt is masked, the completion learned); ``loss_type``
must stay ``"nll"``.
"""

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig

from del_core.console import filter_known_warnings
from del_core.integrations import DELSFTTrainer
from del_core.integrations.example_cli import example_arguments, loss_line, print_auto_weight
from del_core.models import resolve_model

filter_known_warnings()


def arithmetic_dataset(n: int) -> Dataset:
    """``n`` prompt-completion rows such as ("What is 12 + 30?", " 12 + 30 = 42.")."""
    pairs = [(7 * i % 997 + 1, 13 * i % 991 + 1) for i in range(n)]
    rows = [{"prompt": f"What is {a} + {b}?", "completion": f" {a} + {b} = {a + b}."} for a, b in pairs]
    return Dataset.from_list(rows)


def main() -> None:
    args = example_arguments(__doc__, "runs/trl-sft-example")  # model= loss= loss.weight= steps= ...

    source = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = SFTConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=args.steps,
        learning_rate=2e-5,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),  # TRL defaults to bf16 autocast, which is slow on CPU
        deepspeed=args.deepspeed,
    )
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    trainer = DELSFTTrainer(
        model=model,
        args=config,
        train_dataset=arithmetic_dataset(4 * args.steps),
        processing_class=tokenizer,
        loss=args.loss_spec,  # LossSpec(args.loss, weight=args.loss_weight): a name, a lambda or "auto"
    )
    print(loss_line(trainer))
    trainer.train()
    print_auto_weight(trainer)


if __name__ == "__main__":
    main()
