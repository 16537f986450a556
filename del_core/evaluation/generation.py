"""Greedy generation back ends: vLLM (GPU, tensor parallel) or batched Hugging Face ``generate``.

``make_generator(model, backend="auto")`` picks vLLM when it imports and a CUDA GPU is present, HF
otherwise. Both encode prompts exactly as training does (:func:`del_core.data.prompting.prompt_ids`:
no special tokens added), decode greedily, stop at EOS, ``max_new_tokens`` or a ``STOP`` marker (the
start of a next Alpaca section) during generation, and cut each output before that marker, so their
outputs are comparable. ``generate(prompts, desc=, max_new_tokens=)`` may override the length per call.
Models are found by the project's one resolver (:mod:`del_core.models.sources`): an HF directory, a
training output directory (its ``final/``), a ``.gguf`` file or ``smollm2``, or a hub name.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from del_core.data.prompting import prompt_ids

STOP = ("\n### Instruction", "\n### Input", "\n### Response", "\n\n\n\n")


def cut_at_stop(text: str) -> str:
    cut = min((i for i in (text.find(marker) for marker in STOP) if i >= 0), default=len(text))
    return text[:cut]


@contextlib.contextmanager
def _left_padding(tokenizer: Any) -> Iterator[None]:
    """Left padding for batched generation (a pad token = EOS when the tokenizer has none)."""
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        yield
    finally:
        tokenizer.padding_side = side


def _generate_batch(
    lm: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int, device: Any, synced_gpus: bool
) -> list[str]:
    """Greedy completions of one left-padded batch, decoded without the prompt tokens."""
    ids = [prompt_ids(tokenizer, prompt) for prompt in prompts]
    encoded = tokenizer.pad({"input_ids": ids}, return_tensors="pt", padding=True).to(device)
    generated = lm.generate(
        **encoded,
        max_new_tokens=max_new_tokens,
        stop_strings=list(STOP),
        tokenizer=tokenizer,  # generate needs it to find the stop strings
        do_sample=False,
        num_beams=1,
        synced_gpus=synced_gpus,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        # None drops the sampling settings a model's generation_config may carry (greedy ignores them).
        temperature=None,
        top_p=None,
        top_k=None,
        use_cache=True,
    )
    return tokenizer.batch_decode(generated[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)


def generate_greedy(
    lm: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int,
    device: Any,
    batch_size: int = 8,
    synced_gpus: bool = False,
    desc: str = "generate",
) -> list[str]:
    """Greedy completions of ``prompts``, in their order, each cut at :data:`STOP` (the project's one
    generation path: the evaluator, the study and the trainer's held-out answers).

    Prompts are batched ``batch_size`` at a time, longest first (similar lengths waste less
    padding), left-padded; decoding stops at EOS or ``max_new_tokens``. The tokenizer's padding side
    is restored afterwards (a missing pad token is set to EOS and kept); the model runs in eval
    mode and gets its train/eval mode back. ``synced_gpus`` must be True on every rank under ZeRO-3
    with several ranks: each rank then keeps running forwards until all ranks are done, since
    every forward gathers parameters collectively.
    """
    import torch
    from tqdm import tqdm

    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    outputs: list[str] = [""] * len(prompts)
    bar = tqdm(total=len(prompts), desc=desc, unit="q", file=sys.stderr, dynamic_ncols=True, disable=None)
    was_training = lm.training
    lm.eval()
    try:
        with _left_padding(tokenizer), torch.no_grad(), bar:
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                texts = _generate_batch(lm, tokenizer, [prompts[i] for i in batch], max_new_tokens, device, synced_gpus)
                for i, text in zip(batch, texts):
                    outputs[i] = cut_at_stop(text)
                bar.update(len(batch))
    finally:
        lm.train(was_training)
    return outputs


class GeneratorError(ValueError):
    """A back end that cannot run here (e.g. vLLM not installed); the message says what is missing."""


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class HFGenerator:
    """A model and its tokenizer loaded once (CPU or one GPU); :meth:`generate` is :func:`generate_greedy`."""

    name = "hf"

    def __init__(
        self,
        model_path: str,
        batch_size: int = 8,
        max_new_tokens: int = 512,
        dtype: str = "auto",
        device: Optional[str] = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(self.device)
        self.model.eval()
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens

    def generate(
        self, prompts: Sequence[str], desc: str = "generate", max_new_tokens: Optional[int] = None
    ) -> list[str]:
        length = max_new_tokens or self.max_new_tokens
        return generate_greedy(
            self.model, self.tokenizer, prompts, length, self.device, batch_size=self.batch_size, desc=desc
        )


class VLLMGenerator:
    """vLLM offline inference, greedy, ``tensor_parallel_size=tp``."""

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        tp: int = 1,
        max_new_tokens: int = 512,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.9,
    ):
        from vllm import LLM, SamplingParams

        self.llm = LLM(
            model=model_path,
            tensor_parallel_size=tp,
            dtype=dtype,
            trust_remote_code=False,
            gpu_memory_utilization=gpu_memory_utilization,
        )
        self.sampling_params, self.max_new_tokens = SamplingParams, max_new_tokens
        self.tokenizer = self.llm.get_tokenizer()

    def generate(
        self, prompts: Sequence[str], desc: str = "generate", max_new_tokens: Optional[int] = None
    ) -> list[str]:
        """Greedy completions; prompts go in as token ids so that vLLM adds no BOS of its own."""
        params = self.sampling_params(
            temperature=0.0, max_tokens=max_new_tokens or self.max_new_tokens, stop=list(STOP)
        )
        requests = [{"prompt_token_ids": prompt_ids(self.tokenizer, prompt)} for prompt in prompts]
        results = self.llm.generate(requests, params, use_tqdm=True)
        return [cut_at_stop(r.outputs[0].text) for r in results]


def check_backend(backend: str) -> str:
    """The back end ``backend`` stands for here (``auto``: vLLM when it imports and a CUDA GPU is
    present, else HF); :class:`GeneratorError` when it cannot run. Loads no model."""
    if backend == "auto":
        return "vllm" if vllm_available() and gpu_available() else "hf"
    if backend == "vllm" and not vllm_available():
        raise GeneratorError("backend vllm needs the vllm package (pip install vllm) and a GPU")
    if backend not in ("vllm", "hf"):
        raise GeneratorError(f"unknown backend {backend!r}: auto, vllm or hf")
    return backend


def make_generator(
    model_path: str,
    backend: str = "auto",
    tp: int = 1,
    batch_size: int = 8,
    max_new_tokens: int = 512,
    dtype: str = "auto",
) -> HFGenerator | VLLMGenerator:
    """The generator of ``backend`` (see :func:`check_backend`) for the model at ``model_path`` (an
    HF directory or hub name: :func:`del_core.models.sources.resolve_model`'s result)."""
    backend = check_backend(backend)
    if backend == "vllm":
        return VLLMGenerator(model_path, tp=tp, max_new_tokens=max_new_tokens, dtype=dtype)
    if tp != 1:
        print(f"[evaluate] tp={tp} applies to vLLM only; the HF back end uses one device", file=sys.stderr)
    return HFGenerator(model_path, batch_size=batch_size, max_new_tokens=max_new_tokens, dtype=dtype)
