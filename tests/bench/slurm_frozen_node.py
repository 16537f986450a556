"""A hung node on the Slurm test cluster: how long until the job ends (the collective timeout).

    python tests/bench/slurm_frozen_node.py                   # NCCL_TIMEOUT_S=60: ~70 s, root and Slurm needed
    python tests/bench/slurm_frozen_node.py --timeout-s 120

Starts the test cluster (tests/helpers/slurm_cluster.py), submits launch/slurm/train.sbatch (2 nodes
x 1 process, the tiny Qwen2 with the real Qwen2 tokenizer: DEL_SHARED_DIR) with
``NCCL_TIMEOUT_S=--timeout-s`` and a checkpoint every step, and after step 2 freezes node 2's
training processes (SIGSTOP: a node that hangs or whose network is gone, unlike a crash, closes no
connection). Prints the seconds from the freeze to the job's end, its state, the run's status and
the surviving rank's error (gloo: ``Timed out waiting <ms> for ... operation``). Without the
timeout taking effect it would wait DeepSpeed's default, 10 minutes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.append(str(HERE.parent))  # tests/: the helpers (after the checkout: tests/del_core is not del_core)

from helpers.shared import real_tokenizer  # noqa: E402
from helpers.slurm_cluster import ClusterLayout, SlurmCluster, cannot_run_reason  # noqa: E402
from helpers.slurm_training import submit_training, wait_for_step  # noqa: E402
from helpers.training import REPO, make_tiny_qwen2  # noqa: E402


def measure(cluster: SlurmCluster, work: Path, timeout_s: int) -> None:
    model = make_tiny_qwen2(work / "model", real_tokenizer("qwen2"))
    job = submit_training(
        cluster, model, work, "frozen", 200, env={"NCCL_TIMEOUT_S": str(timeout_s)},
        **{"data": "synthetic:800", "run.save_every": 1},
    )  # fmt: skip
    wait_for_step(cluster, job, 2)
    frozen = cluster.signal_node_processes(1, str(REPO / "recipes" / "train.py"), signal.SIGSTOP)
    started = time.monotonic()
    info = cluster.wait(job.job_id, ("FAILED", "COMPLETED", "CANCELLED"), timeout_s + 600)
    ended_s = time.monotonic() - started
    status = (job.output_dir / "run_status.json").read_text().split()
    errors = [line for line in job.node_log(0).splitlines() if "[rank0]: RuntimeError" in line]
    print(f"froze {len(frozen)} processes on node 2 after step 2; NCCL_TIMEOUT_S={timeout_s}")
    print(f"job {info.state} {ended_s:.1f} s after the freeze; run_status.json {' '.join(status)}")
    print("rank 0:", errors[0] if errors else "(no RuntimeError in node0.log)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout-s", type=int, default=60)
    args = parser.parse_args(argv)
    reason = cannot_run_reason()
    if reason:
        sys.exit(f"cannot run: {reason}")
    cluster = SlurmCluster(ClusterLayout())
    cluster.start()
    try:
        with tempfile.TemporaryDirectory(prefix="frozen-node-") as work:
            measure(cluster, Path(work), args.timeout_s)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
