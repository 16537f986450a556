"""Greedy generation back ends: vLLM (GPU, tensor parallel) or batched Hugging Face ``generate``.

``make_generator(model, backend="auto")`` picks vLLM when it imports and a CUDA GPU is present, HF
otherwise. Both decode greedily, stop at EOS or ``max_new_tokens``, and cut each output at the first
``STOP`` marker (the start of a next Alpaca section), so their outputs are comparable.
``resolve_model(path)`` accepts an HF directory, a training output directory (its ``final/``), a
``.gguf`` file or ``smollm2`` (converted once, as in training), or a hub name.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional, Sequence

STOP = ("\n### Instruction", "\n### Input", "\n### Response", "\n\n\n\n")


def cut_at_stop(text: str) -> str:
    cut = min((i for i in (text.find(marker) for marker in STOP) if i >= 0), default=len(text))
    return text[:cut]


def resolve_model(source: str, cache_dir: Optional[Path] = None) -> str:
    """An HF model directory or hub name for ``source`` (see the module docstring)."""
    path = Path(source)
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        if (path / "final" / "config.json").is_file():
            return str(path / "final")
        raise SystemExit(f"{path} is neither a Hugging Face model directory (config.json) nor a training "
                         f"output directory with final/config.json")
    if source == "smollm2" or path.suffix == ".gguf":
        from recipes.modeling import convert_gguf, resolve_source

        from del_core.tokenizers import DEFAULT_CACHE

        cache = cache_dir or DEFAULT_CACHE.parent
        return str(convert_gguf(Path(resolve_source(source)), cache))
    if path.exists() or source.startswith((".", "/")):
        raise SystemExit(f"model not found or not a model: {source}")
    return source  # a hub name


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class HFGenerator:
    """Batched greedy ``generate`` with left padding (CPU or one GPU)."""

    name = "hf"

    def __init__(self, model_path: str, batch_size: int = 8, max_new_tokens: int = 512,
                 dtype: str = "auto", device: Optional[str] = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(self.device)
        self.model.eval()
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens

    def generate(self, prompts: Sequence[str], desc: str = "generate") -> list[str]:
        import torch
        from tqdm import tqdm

        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # similar lengths per batch
        outputs: list[Optional[str]] = [None] * len(prompts)
        with tqdm(total=len(prompts), desc=desc, unit="q", file=sys.stderr, dynamic_ncols=True, disable=None) as bar:
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                encoded = self.tokenizer([prompts[i] for i in batch], return_tensors="pt", padding=True,
                                         add_special_tokens=False).to(self.device)
                with torch.no_grad():
                    generated = self.model.generate(
                        **encoded, max_new_tokens=self.max_new_tokens, do_sample=False, num_beams=1,
                        pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id,
                        temperature=None, top_p=None, top_k=None,
                    )
                texts = self.tokenizer.batch_decode(generated[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
                for i, text in zip(batch, texts):
                    outputs[i] = cut_at_stop(text)
                bar.update(len(batch))
        return outputs  # type: ignore[return-value]


class VLLMGenerator:
    """vLLM offline inference, greedy, ``tensor_parallel_size=tp``."""

    name = "vllm"

    def __init__(self, model_path: str, tp: int = 1, max_new_tokens: int = 512, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.9):
        from vllm import LLM, SamplingParams

        self.llm = LLM(model=model_path, tensor_parallel_size=tp, dtype=dtype, trust_remote_code=False,
                       gpu_memory_utilization=gpu_memory_utilization)
        self.params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=list(STOP))

    def generate(self, prompts: Sequence[str], desc: str = "generate") -> list[str]:
        results = self.llm.generate(list(prompts), self.params, use_tqdm=True)
        return [cut_at_stop(r.outputs[0].text) for r in results]


def make_generator(model_path: str, backend: str = "auto", tp: int = 1, batch_size: int = 8,
                   max_new_tokens: int = 512, dtype: str = "auto"):
    """The back end: ``vllm``, ``hf``, or ``auto`` (vLLM when importable and a GPU is present)."""
    if backend == "auto":
        backend = "vllm" if vllm_available() and gpu_available() else "hf"
    if backend == "vllm":
        if not vllm_available():
            raise SystemExit("--backend vllm needs the vllm package (pip install vllm) and a GPU")
        return VLLMGenerator(model_path, tp=tp, max_new_tokens=max_new_tokens, dtype=dtype)
    if backend == "hf":
        if tp != 1:
            print(f"[evaluate] --tp {tp} applies to vLLM only; the HF back end uses one device", file=sys.stderr)
        return HFGenerator(model_path, batch_size=batch_size, max_new_tokens=max_new_tokens, dtype=dtype)
    raise SystemExit(f"unknown --backend {backend!r}: auto, vllm or hf")
