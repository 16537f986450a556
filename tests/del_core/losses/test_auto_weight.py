"""weight="auto": the rule (lambda = ratio x CE / digit term), its errors, and the one measurement
both trainers run on the first step's batch (``measure_auto_weight``)."""

from __future__ import annotations

import math

import pytest
import torch

from del_core.losses import (
    AUTO_PLACEHOLDER,
    DEFAULT_AUTO_RATIO,
    WEIGHTED_LOSSES,
    AutoWeight,
    AutoWeightError,
    LossSpec,
    auto_weight,
    measure_auto_weight,
)
from helpers.toy_vocab import VOCAB, make_batch


def test_auto_weight_makes_the_weighted_term_the_ratio_of_ce():
    # SmolLM2-135M at the start of the main job: CE 0.6669, DEL term 19.6403 -> 0.02 x 0.6669 / 19.6403
    assert auto_weight(0.6669, 19.6403) == pytest.approx(6.7911e-4, rel=1e-4)
    assert DEFAULT_AUTO_RATIO == 0.02
    assert auto_weight(2.0, 0.5, ratio=0.1) * 0.5 == pytest.approx(0.1 * 2.0)


@pytest.mark.parametrize("ce, term", [(1.0, 0.0), (0.0, 1.0), (1.0, math.nan), (math.inf, 1.0)])
def test_auto_weight_refuses_a_batch_that_cannot_set_it(ce, term):
    with pytest.raises(AutoWeightError, match="a batch without digit positions cannot set lambda"):
        auto_weight(ce, term)


def test_the_record_says_what_lambda_came_from():
    chosen = AutoWeight.measure(0.5, 20.0, 0.02)
    assert chosen == AutoWeight(0.02 * 0.5 / 20.0, 0.5, 20.0, 0.02)
    assert "x40 the CE" in chosen.describe("del")
    with pytest.raises(AutoWeightError, match="auto weight: the first batch gives CE 0.5 and digit term 0.0"):
        AutoWeight.measure(0.5, 0.0, 0.02)


class Dropout(torch.nn.Module):
    """A model whose only behaviour is its mode; it draws from the RNG in training mode."""

    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)


def test_measure_sums_the_micro_batches_and_the_ranks_in_eval_mode_without_touching_the_rng():
    model = Dropout().train()
    terms = {"a": torch.tensor([0.25, 1.5]), "b": torch.tensor([0.5, 2.5])}
    seen = []

    def unit_terms(name: str) -> torch.Tensor:
        seen.append((name, model.training, torch.is_grad_enabled()))
        torch.rand(3)  # the measurement may draw: training must not see it
        return terms[name].requires_grad_(True) * 1.0

    torch.manual_seed(7)
    expected_draw = torch.rand(2)
    torch.manual_seed(7)
    chosen = measure_auto_weight(model, ["a", "b"], unit_terms, lambda totals: 2 * totals, ratio=0.1)
    # two ranks holding the same sums: CE = 2 x 0.75, term = 2 x 4.0
    assert chosen == AutoWeight(0.1 * 1.5 / 8.0, 1.5, 8.0, 0.1)
    assert seen == [("a", False, False), ("b", False, False)] and model.training
    assert torch.equal(torch.rand(2), expected_draw)


def test_measure_sums_in_the_dtype_asked_for():
    """float32 sums round as float32 (the DeepSpeed trainer's sum), float64 sums do not."""
    values = [torch.tensor([1.0, 1.0]), torch.tensor([2.0**-24, 2.0**-24])]

    def by_index(i: int) -> torch.Tensor:
        return values[i]

    single = measure_auto_weight(Dropout(), [0, 1], by_index, lambda t: t, 1.0, dtype=torch.float32)
    double = measure_auto_weight(Dropout(), [0, 1], by_index, lambda t: t, 1.0, dtype=torch.float64)
    assert (single.ce, double.ce) == (1.0, 1.0 + 2.0**-24)


@pytest.mark.parametrize("name", WEIGHTED_LOSSES)
def test_the_measured_lambda_makes_the_first_batch_term_the_ratio_of_its_ce(name):
    """With the loss built for "auto" (its placeholder lambda), its aux is the weight-1 digit term;
    once the measured lambda is set, the same batch's aux is ``ratio`` x its CE."""
    options = {"noise_scale": 0.0} if name == "ntil" else {}
    spec = LossSpec(name, weight="auto", auto_ratio=0.05, options=options)
    loss = spec.build(VOCAB)
    assert loss.weight == AUTO_PLACEHOLDER == 1.0
    logits, labels = make_batch()
    unit = LossSpec(name, weight=1.0, options=options).build(VOCAB)(logits, labels)

    def unit_terms(_batch) -> torch.Tensor:
        out = loss(logits, labels)
        return torch.stack([out.ce, out.aux])

    chosen = measure_auto_weight(torch.nn.Module(), [0], unit_terms, lambda t: t, spec.auto_ratio)
    assert (chosen.ce, chosen.unit_term) == (unit.ce.item(), unit.aux.item())
    loss.set_weight(chosen.weight)
    out = loss(logits, labels)
    assert out.aux.item() == pytest.approx(0.05 * out.ce.item(), rel=1e-12)
    with pytest.raises(ValueError, match=f"{name}: weight must be a finite number >= 0, got -1"):
        loss.set_weight(-1)
