"""The engine helpers 0.3 replaced still work for one release and warn naming the replacement
(the deprecation policy: docs/development.md#deprecation-policy)."""

from __future__ import annotations

import pytest

from del_core.engines import deepspeed, fsdp2


class _FakeDeepSpeedEngine:
    """The two DeepSpeed engine methods the deprecated helpers forward to, with known answers: the
    helpers only forward, and a real engine (deepspeed.initialize in a process group) would test
    DeepSpeed, not them; the engine's own methods are exercised by the training tests."""

    def get_global_grad_norm(self) -> float:
        return 1.25

    def zero_optimization_stage(self) -> int:
        return 3


@pytest.mark.parametrize(
    ("call", "expected", "message"),
    [
        (
            lambda: deepspeed.grad_norm(_FakeDeepSpeedEngine()),
            1.25,
            "del_core.engines.deepspeed.grad_norm(engine) is deprecated and will be removed in 0.4; "
            "use engine.get_global_grad_norm()",
        ),
        (
            lambda: deepspeed.zero_stage(_FakeDeepSpeedEngine()),
            3,
            "del_core.engines.deepspeed.zero_stage(engine) is deprecated and will be removed in 0.4; "
            "use engine.zero_optimization_stage()",
        ),
        (
            lambda: fsdp2.gradient_divisor(4),
            4,
            "del_core.engines.fsdp2.gradient_divisor(dp) is deprecated and will be removed in 0.4; "
            "use the backend's gradient_divisor",
        ),
    ],
)
def test_a_replaced_engine_helper_answers_and_warns(call, expected, message):
    with pytest.warns(FutureWarning) as caught:
        assert call() == expected
    assert [str(w.message) for w in caught] == [message]
