"""The trainer asks the loss what it needs (``del_core.losses.loss_needs``): a tokenizer without a
number vocabulary refuses exactly the losses that score digits, and the others run without one."""

import contextlib

import pytest

from del_core.config import ConfigError
from del_core.losses import LOSS_NAMES, loss_needs
from del_core.parallel import ParallelDims
from del_core.training import load_train_config
from del_core.training import trainer as trainer_module
from del_core.training.trainer import Trainer
from helpers.shared import REPO, vocab_file


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_a_tokenizer_without_a_number_vocabulary_refuses_only_the_losses_that_need_one(
    name, tmp_path, capsys, monkeypatch
):
    gpt2 = vocab_file("gpt-2")  # irregular multi-digit number tokens
    overrides = [f"loss={name}", "loss.weight=", f"model.tokenizer={gpt2}", f"run.output_dir={tmp_path}"]
    trainer = Trainer(load_train_config(REPO / "recipes" / "configs" / "tiny.yaml", overrides))
    trainer.dims = ParallelDims(world=1, rank=0, tp=1, dp=1, dp_rank=0)
    # One process, no process group: nothing to order.
    monkeypatch.setattr(trainer_module, "local_main_first", lambda _rank: contextlib.nullcontext())
    if loss_needs(name).vocab:
        with pytest.raises(ConfigError, match=f"loss {name} cannot score this tokenizer: .*irregular multi-digit"):
            trainer._setup_tokenizer()
        return
    trainer._setup_tokenizer()
    assert trainer.vocab is None
    assert f"loss {name} runs without digit metrics" in capsys.readouterr().out
