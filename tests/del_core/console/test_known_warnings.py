"""The entry scripts' warning filter: the known third-party deprecations are hidden, by category and
module; del_core's own warnings and every other warning still show."""

from __future__ import annotations

import ast
import warnings

import pytest
import torch
import torch.distributed as dist

from del_core.console import KNOWN_WARNINGS, filter_known_warnings
from helpers.shared import REPO

ENTRY_SCRIPTS = sorted([*(REPO / "recipes").glob("*.py"), *(REPO / "recipes" / "examples").glob("*.py")])


def _shown(category: type[Warning], module: str, message: str = "`x` is deprecated") -> bool:
    """Whether a warning of ``category`` raised from ``module`` reaches the user with the filter on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_known_warnings()
        warnings.warn_explicit(message, category, filename=f"{module}.py", lineno=1, module=module)
    return len(caught) == 1


def _all_gather_warnings(filtered: bool) -> list[str]:
    """The FutureWarnings of the deprecated ``all_gather_into_tensor`` that DeepSpeed's ZeRO calls on
    every step (without a process group the call then raises; the warning comes first)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if filtered:
            filter_known_warnings()
        with pytest.raises((ValueError, RuntimeError)):
            dist.all_gather_into_tensor(torch.zeros(2), torch.zeros(1))
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_the_real_torch_distributed_deprecation_is_hidden():
    assert any("all_gather_into_tensor` is deprecated" in m for m in _all_gather_warnings(filtered=False))
    assert _all_gather_warnings(filtered=True) == []


@pytest.mark.parametrize(
    ("category", "module", "message"),
    [
        (FutureWarning, "torch.distributed.c10d_logger", "`torch.distributed.reduce_scatter_tensor` is deprecated."),
        (
            FutureWarning,
            "torch.distributed.distributed_c10d",
            "`torch.distributed._all_gather_base` is a private function and will be deprecated.",
        ),
        (FutureWarning, "deepspeed.runtime.zero.linear", "`torch.cuda.amp.custom_fwd(args...)` is deprecated."),
        (FutureWarning, "deepspeed", "anything DeepSpeed deprecates"),
        (
            FutureWarning,
            "transformers.training_args",
            "`gradient_checkpointing` is deprecated and will be removed in v6. Use `activation_checkpointing` instead.",
        ),
    ],
)
def test_known_third_party_deprecations_are_hidden(category, module, message):
    assert not _shown(category, module, message)


@pytest.mark.parametrize(
    ("category", "module", "message"),
    [
        # del_core's own: a renamed key's FutureWarning must reach the user.
        (FutureWarning, "del_core.config.loader", "key 'lr' is deprecated; use 'optimizer.lr'"),
        (FutureWarning, "__main__", "`torch.distributed.all_gather_into_tensor` is deprecated."),
        # The same modules, other categories or other messages: real information.
        (UserWarning, "deepspeed.runtime.engine", "something went wrong"),
        (UserWarning, "torch.distributed.distributed_c10d", "`torch.distributed.barrier` is deprecated"),
        (FutureWarning, "torch.distributed.checkpoint", "the checkpoint format will change"),
        # Other modules, and names that only start like a filtered one.
        (FutureWarning, "transformers.trainer", "`x` is deprecated"),
        (FutureWarning, "transformers.training_args", "`logging_dir` is deprecated"),
        (FutureWarning, "deepspeed_extension", "`x` is deprecated"),
        (FutureWarning, "torch.distributedx", "`torch.distributed.x` is deprecated"),
    ],
)
def test_other_warnings_still_show(category, module, message):
    assert _shown(category, module, message)


def test_a_second_call_adds_no_filters():
    with warnings.catch_warnings():
        filter_known_warnings()
        count = len(warnings.filters)
        filter_known_warnings()
        assert len(warnings.filters) == count
    assert len(KNOWN_WARNINGS) >= 2 and all(k.reason for k in KNOWN_WARNINGS)


@pytest.mark.parametrize("script", ENTRY_SCRIPTS, ids=lambda p: p.name)
def test_every_entry_script_calls_it_at_module_level(script):
    """At module level (not under ``if __name__ == "__main__"``), so that torchrun's ranks and a
    ``spawn`` child, which re-imports the main module, install it too."""
    tree = ast.parse(script.read_text())
    calls = [
        node
        for node in tree.body
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and getattr(node.value.func, "id", None) == "filter_known_warnings"
    ]
    assert len(calls) == 1, script
