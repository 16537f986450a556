"""The chunked loss under DeepSpeed ZeRO-3 (2 CPU processes): the partitioned LM-head weight is
gathered for the loss's forward and backward, so training follows the single-process run."""

import json
import tempfile
from pathlib import Path

import pytest
import torch.multiprocessing as mp

pytestmark = pytest.mark.launches

pytest.importorskip("deepspeed")

from del_core.parallel import free_port  # noqa: E402
from helpers.zero3_worker import reference_losses, worker  # noqa: E402


def test_chunked_loss_trains_under_zero3_like_a_single_process():
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(worker, args=(2, free_port(), tmp), nprocs=2, start_method="spawn")
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(2)]
    expected = reference_losses()
    for result in ranks:
        assert result["partitioned"], "ZeRO-3 did not partition the LM head: the test would prove nothing"
        assert result["losses"] == pytest.approx(expected, rel=1e-5)
    assert expected[0] != pytest.approx(expected[-1], rel=1e-3)  # the steps changed the weights
