"""The sequence-parallel memory benchmark (tests/bench/sequence_parallel_memory.py) in its smallest
form: two torchrun runs of the trainer (sp = 1 and 2) on one 512-token sequence."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.shared import REPO

pytestmark = [pytest.mark.launches, pytest.mark.slow]


def test_memory_per_rank_halves_at_sp_2_as_the_model_predicts(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "bench"))
    import sequence_parallel_memory as bench

    out = tmp_path / "points.json"
    bench.main(["--quick", "--lengths", "512", "--work", str(tmp_path / "work"), "--json", str(out)])
    points = {p["sp"]: p for p in json.loads(out.read_text())}
    args = bench.parse_args(["--quick"])
    live = {sp: max(max(rank) for rank in points[sp]["live_bytes"]) for sp in (1, 2)}
    predicted = {sp: bench.predicted(args, 512, sp) for sp in (1, 2)}
    for sp in (1, 2):
        assert 0.9 < live[sp] / predicted[sp] < 1.05, (sp, live[sp], predicted[sp])
    assert 0.45 < live[2] / live[1] < 0.6
