"""DEL from TRL's ``SFTTrainer``: prompt-completion data, TRL's masking, the del_core loss.

    python recipes/examples/trl_sft.py                         # SmolLM2-135M-Instruct, offline, CPU
    python recipes/examples/trl_sft.py --model DIR --steps 4 --loss dist2
    accelerate launch --num_processes 8 recipes/examples/trl_sft.py --model Qwen/Qwen2.5-1.5B \
        --deepspeed ds_configs/zero3.json

``DELSFTTrainer`` is ``SFTTrainer`` whose loss is a del_core loss on the model's full logits, with
the token and digit counts of the whole optimizer step over all ranks (docs/hf_trainer.md). TRL
prepares the data as usual (here: the prompt is masked, the completion learned); ``loss_type``
must stay ``"nll"``.
"""

import argparse

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig

from del_core.console import filter_known_warnings
from del_core.integrations import DELSFTTrainer
from del_core.integrations.loss_setup import loss_weight_arg
from del_core.models import resolve_model

filter_known_warnings()


def arithmetic_dataset(n: int) -> Dataset:
    """``n`` prompt-completion rows such as ("What is 12 + 30?", " 12 + 30 = 42.")."""
    pairs = [(7 * i % 997 + 1, 13 * i % 991 + 1) for i in range(n)]
    rows = [{"prompt": f"What is {a} + {b}?", "completion": f" {a} + {b} = {a + b}."} for a, b in pairs]
    return Dataset.from_list(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2", help="HF directory or hub name; smollm2 = the offline default")
    parser.add_argument("--loss", default="del", help="mle mixce emo ntl_was ntl_mse dist2 del")
    parser.add_argument(
        "--loss-weight",
        type=loss_weight_arg,
        default=None,
        help="lambda, or auto (from the first batch); default: the loss's own",
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--output-dir", default="runs/trl-sft-example")
    parser.add_argument("--deepspeed", default=None, help="a DeepSpeed JSON (ds_configs/zero3.json)")
    args = parser.parse_args()

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
        loss=args.loss,
        loss_weight=args.loss_weight,
    )
    loss = trainer.del_loss
    print(f"[del] loss {loss.name} (lambda {loss.weight}); digits: {loss.vocab.describe()}")
    trainer.train()


if __name__ == "__main__":
    main()
