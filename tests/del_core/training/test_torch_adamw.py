"""The trainer's torch AdamW: fused where torch has the kernel, the same update as torch's for-loop."""

from __future__ import annotations

import torch

from del_core.engines.optimizer import torch_adamw


def _groups(params: list[torch.nn.Parameter]) -> list[dict]:
    return [{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:], "weight_decay": 0.0}]


def _params(seed: int) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    shapes = ((64, 32), (32,))
    return [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]


def test_cpu_parameters_get_the_fused_kernel_with_the_for_loops_update():
    fused_params, loop_params = _params(0), _params(0)
    fused = torch_adamw(_groups(fused_params), lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    loop = torch.optim.AdamW(_groups(loop_params), lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    assert fused.defaults["fused"] is True and not loop.defaults["fused"]
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        for a, b in zip(fused_params, loop_params):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        fused.step()
        loop.step()
    for a, b, start in zip(fused_params, loop_params, _params(0)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        assert (a - start).abs().mean() > 1e-3  # three steps of lr 1e-2 moved the weights


def test_parameters_off_the_fused_devices_get_the_for_loop():
    params = [torch.nn.Parameter(torch.zeros(4, 4, device="meta")), torch.nn.Parameter(torch.zeros(4, device="meta"))]
    assert not torch_adamw(_groups(params), lr=1e-3, betas=(0.9, 0.999), eps=1e-8).defaults["fused"]
