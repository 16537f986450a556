"""A real Slurm cluster for the tests: ``munged``, ``slurmctld`` and two ``slurmd`` nodes from
Debian's packages (``slurm-wlm`` 22.05, ``munge``), each node in its own network namespace with its
own hostname and address.

    cluster = SlurmCluster(ClusterLayout())
    cluster.start()              # ~1 s; raises ClusterError naming what failed
    job = cluster.submit(["launch/slurm/train.sbatch", ...], cwd=..., env=...)
    cluster.wait(job, "COMPLETED")
    cluster.stop()               # every process stopped by its PID, namespaces/links/hosts lines removed

The network: a bridge in the host namespace carries the controller's address (``.1``) and one veth
pair per node (``.11``, ``.12``); each node's ``slurmd`` runs under ``nsenter --net`` (not ``ip
netns exec``, which remounts /sys: slurmd then finds no cgroup mount) and ``unshare --uts --mount``
for its hostname and a ``resolv.conf`` naming 127.0.0.1 (without it the IPv6 lookup of a node name
waits 10 s on DNS). The node names resolve through lines appended to /etc/hosts, marked with the
cluster's name so they can be removed. The nodes declare 64 CPUs and 8 fake GPUs
(``SlurmdParameters=config_overrides``), so the ``#SBATCH`` resource lines of
launch/slurm/train.sbatch are honoured as written.

Teardown (:meth:`SlurmCluster.stop`) cancels the jobs, stops the daemons by their PIDs, kills any
process still inside a node's namespace (a job's processes outlive slurmd), deletes the namespaces,
the bridge and the hosts lines, and raises when anything is left. :meth:`SlurmCluster.start` first
removes what an earlier, killed session may have left (:func:`sweep`).

By hand: ``python tests/helpers/slurm_cluster.py hold`` starts the cluster and keeps it up until
SIGTERM/SIGINT (``SLURM_CONF=/tmp/delslurm-cluster/slurm.conf sinfo`` then reaches it);
``python tests/helpers/slurm_cluster.py down`` removes a leftover one.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HOSTS_FILE = Path("/etc/hosts")
NETNS_DIR = Path("/run/netns")
REQUIRED_PROGRAMS = (
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scontrol",
    "scancel",
    "squeue",
    "sinfo",
    "ip",
    "nsenter",
)
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


class ClusterError(RuntimeError):
    """The cluster could not be started, or a job did not reach the state waited for."""


@dataclass(frozen=True)
class ClusterLayout:
    """Names and addresses of one cluster: ``name`` prefixes every namespace, link, hosts line and
    the work folder; nodes ``<name>node1``/``2`` at 10.``subnet``.0.11/12; the controller at
    10.``subnet``.0.1, port ``port`` (slurmd listens on ``port`` + 1 in each node namespace)."""

    name: str = "delslurm"
    subnet: int = 213
    port: int = 6917
    nodes: int = 2

    @property
    def work_dir(self) -> Path:
        return Path("/tmp") / f"{self.name}-cluster"

    @property
    def bridge(self) -> str:
        return f"{self.name}-br"

    @property
    def controller_address(self) -> str:
        return f"10.{self.subnet}.0.1"

    def node_names(self) -> list[str]:
        return [f"{self.name}node{i}" for i in range(1, self.nodes + 1)]

    def node_address(self, index: int) -> str:
        """The address of node ``index`` (0-based)."""
        return f"10.{self.subnet}.0.{11 + index}"

    def netns(self, index: int) -> str:
        return f"{self.name}-n{index + 1}"

    def host_veth(self, index: int) -> str:
        return f"{self.name}-v{index + 1}"

    @property
    def hosts_marker(self) -> str:
        return f"# {self.name} test cluster"


@dataclass(frozen=True)
class JobInfo:
    """One job as ``scontrol show job`` reports it."""

    job_id: int
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
    restarts: int  # how often the job was requeued
    exit_code: str  # "rc:signal" of the batch script
    node_list: str
    reason: str


def cannot_run_reason() -> Optional[str]:
    """Why this machine cannot run the cluster (a sentence for pytest.skip), or None."""
    if sys.platform != "linux":
        return "a Slurm test cluster needs Linux network namespaces"
    if os.geteuid() != 0:
        return "a Slurm test cluster needs root (network namespaces, slurmd); run the tests as root"
    missing = [p for p in REQUIRED_PROGRAMS if shutil.which(p) is None]
    if missing:
        return (
            f"{', '.join(missing)} not installed: apt-get install --no-install-recommends slurm-wlm slurmctld "
            "slurmd slurm-client munge (`make system-deps` does this, as root)"
        )
    if not Path("/sys/fs/cgroup").is_dir():
        return "Slurm 22.05 always loads a cgroup plugin, and /sys/fs/cgroup is missing"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"this machine cannot create namespaces (unshare --net --uts --mount: {probe.stderr.strip()})"
    return None


def _run(*command: str, check: bool = True, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(command)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
    return proc


# Seconds between Slurm's SIGTERM and SIGKILL to a job step's processes (Slurm's default is 30):
# room for a checkpoint after a stop request, and the bound on a job whose node was lost.
KILL_WAIT_S = 60


def slurm_conf(layout: ClusterLayout, controller_host: str) -> str:
    """The minimal ``slurm.conf``: no accounting, ``proctrack/linuxproc``, ``task/none``,
    ``select/cons_tres``; nodes of 64 CPUs and 8 fake GPUs (``config_overrides``: the node need
    not have them)."""
    work, kill_wait = layout.work_dir, KILL_WAIT_S
    nodes = "\n".join(
        f"NodeName={name} NodeAddr={layout.node_address(i)} CPUs=64 Boards=1 SocketsPerBoard=1 CoresPerSocket=64 "
        "ThreadsPerCore=1 RealMemory=1000 Gres=gpu:8 State=UNKNOWN"
        for i, name in enumerate(layout.node_names())
    )
    return f"""\
ClusterName={layout.name}
SlurmctldHost={controller_host}({layout.controller_address})
SlurmctldPort={layout.port}
SlurmdPort={layout.port + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={work}/munge/munge.socket
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool/%n
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd-%n.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
KillWait={kill_wait}
MinJobAge=600
InactiveLimit=0
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf(layout: ClusterLayout) -> str:
    """Eight fake GPUs per node: links to /dev/null (slurmd drops a GPU without a device file,
    and wants a character device; task/none binds nothing)."""
    files = f"{layout.work_dir}/gpus/nvidia[0-7]"
    return "".join(f"NodeName={name} Name=gpu File={files}\n" for name in layout.node_names())


class SlurmCluster:
    """The cluster of ``layout`` (see the module docstring); :meth:`env` is the environment in
    which Slurm's commands (sbatch, scontrol, ...) talk to it."""

    def __init__(self, layout: ClusterLayout = ClusterLayout()):
        self.layout = layout
        self.work = layout.work_dir
        self.daemons: dict[str, subprocess.Popen] = {}
        self._lock_fd: Optional[int] = None

    # --- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Sweep leftovers, write the configuration, build the network, start the daemons; stops
        whatever was started when a step fails. Waits while another session's cluster of the same
        layout runs (one machine-wide lock per layout name)."""
        self._lock()
        sweep(self.layout)
        try:
            self._write_config()
            self._start_network()
            self._start_munge()
            self._start_daemon("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            for index, name in enumerate(self.layout.node_names()):
                self._start_node(index, name)
            self._wait_nodes_idle()
        except BaseException:
            self.stop()
            raise

    def _lock(self, timeout: float = 600) -> None:
        path = Path("/tmp") / f"{self.layout.name}-cluster.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise ClusterError(f"another test session holds the cluster {self.layout.name} ({path})") from None
                time.sleep(1)
        self._lock_fd = fd

    @property
    def conf(self) -> Path:
        return self.work / "slurm.conf"

    def env(self, base: Optional[dict] = None) -> dict:
        """``base`` (default os.environ) without SLURM_* variables, with SLURM_CONF set."""
        base = dict(os.environ if base is None else base)
        env = {k: v for k, v in base.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def _write_config(self) -> None:
        self.work.mkdir(parents=True)
        for sub in ("state", "munge", *(f"spool/{name}" for name in self.layout.node_names())):
            (self.work / sub).mkdir(parents=True)
        self.conf.write_text(slurm_conf(self.layout, socket.gethostname()))
        (self.work / "gres.conf").write_text(gres_conf(self.layout))
        (self.work / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
        (self.work / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        (self.work / "gpus").mkdir()
        for index in range(8):
            (self.work / "gpus" / f"nvidia{index}").symlink_to("/dev/null")
        munge = self.work / "munge"
        (munge / "munge.key").write_bytes(os.urandom(1024))
        (munge / "munge.key").chmod(0o600)
        shutil.chown(munge, "munge", "munge")
        shutil.chown(munge / "munge.key", "munge", "munge")
        munge.chmod(0o755)  # munged: clients need to reach the socket

    def _start_network(self) -> None:
        layout = self.layout
        _run("ip", "link", "add", layout.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{layout.controller_address}/24", "dev", layout.bridge)
        _run("ip", "link", "set", layout.bridge, "up")
        lines = []
        for index, name in enumerate(layout.node_names()):
            netns, veth = layout.netns(index), layout.host_veth(index)
            _run("ip", "netns", "add", netns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
            _run("ip", "link", "set", veth, "master", layout.bridge, "up")
            _run("ip", "-n", netns, "addr", "add", f"{layout.node_address(index)}/24", "dev", "eth0")
            _run("ip", "-n", netns, "link", "set", "eth0", "up")
            _run("ip", "-n", netns, "link", "set", "lo", "up")
            lines.append(f"{layout.node_address(index)} {name} {layout.hosts_marker}\n")
        with HOSTS_FILE.open("a") as hosts:
            hosts.writelines(lines)

    def _start_daemon(self, key: str, command: list[str], **popen) -> subprocess.Popen:
        log = (self.work / f"{key}.out").open("ab")
        # SLURM_CONF, not only -f: slurmd finds gres.conf and cgroup.conf beside it
        env = self.env()
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, **popen
        )
        log.close()
        self.daemons[key] = proc
        (self.work / "pids").open("a").write(f"{proc.pid} {key}\n")
        return proc

    def _start_munge(self) -> None:
        munge = self.work / "munge"
        self._start_daemon(
            "munged",
            [
                "munged",
                "--foreground",
                "--num-threads=10",
                f"--socket={munge}/munge.socket",
                f"--key-file={munge}/munge.key",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            ],
            user="munge",
            group="munge",
        )
        _wait_for(lambda: (munge / "munge.socket").exists(), 10, "munged's socket", self._logs)

    def _start_node(self, index: int, name: str) -> None:
        """slurmd in the node's network namespace, with its own hostname and resolv.conf (private
        UTS and mount namespaces); nsenter and unshare exec, so the PID is slurmd's."""
        inner = (
            f"hostname {name} && mount --bind {self.work}/resolv.conf /etc/resolv.conf && "
            f"exec slurmd -D -N {name} -f {self.conf}"
        )
        netns = NETNS_DIR / self.layout.netns(index)
        self._start_daemon(
            f"slurmd-{name}", ["nsenter", f"--net={netns}", "unshare", "--uts", "--mount", "sh", "-c", inner]
        )

    def _wait_nodes_idle(self, timeout: float = 30) -> None:
        names = self.layout.node_names()

        def idle() -> bool:
            for proc in self.daemons.values():
                if proc.poll() is not None:
                    raise ClusterError(f"{proc.args[0]} exited {proc.returncode} while starting\n{self._logs()}")
            out = _run("sinfo", "-h", "-N", "-o", "%N %T", env=self.env(), check=False).stdout.split()
            states = dict(zip(out[::2], out[1::2]))
            return all(states.get(n) == "idle" for n in names)

        _wait_for(idle, timeout, f"nodes {', '.join(names)} idle", self._logs)

    def _logs(self) -> str:
        parts = []
        for path in sorted(self.work.glob("*.log")) + sorted(self.work.glob("*.out")):
            parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    # --- jobs ----------------------------------------------------------------------------------
    def submit(self, script_and_args: Sequence[str], cwd: Path, env: dict, options: Sequence[str] = ()) -> int:
        """``sbatch [options] SCRIPT ARGS...`` from ``cwd`` with ``env`` (SLURM_CONF added); the job id."""
        command = ["sbatch", "--parsable", *options, *map(str, script_and_args)]
        proc = subprocess.run(command, cwd=cwd, env=self.env(env), capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClusterError(f"sbatch exited {proc.returncode}: {proc.stderr.strip()}")
        return int(proc.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> JobInfo:
        out = _run("scontrol", "-o", "show", "job", str(job_id), env=self.env()).stdout

        def field(key: str) -> str:
            match = re.search(rf"(?:^| ){key}=(\S*)", out)
            return match.group(1) if match else ""

        return JobInfo(
            job_id,
            field("JobState"),
            int(field("Restarts") or 0),
            field("ExitCode"),
            field("NodeList"),
            field("Reason"),
        )

    def wait(self, job_id: int, states: Sequence[str], timeout: float, restarts: int = 0) -> JobInfo:
        """Poll until the job is in one of ``states`` with at least ``restarts`` requeues; a
        ClusterError with the job's state when it ends in another final state or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.state in states and info.restarts >= restarts:
                return info
            if info.state in FINAL_STATES and info.state not in states:
                raise ClusterError(f"job {job_id} ended {info} while waiting for {'/'.join(states)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"job {job_id} is {info} after {timeout:.0f} s, not {'/'.join(states)}")
            time.sleep(0.25)

    def start_requeued_now(self, job_id: int, restarts: int, timeout: float = 90) -> None:
        """After a requeue: wait until the job is pending again, then lift the ~2 min BeginTime
        Slurm gives a requeued job (a second after PENDING shows: at once, the job credential of
        the old run can still be being revoked)."""
        self.wait(job_id, ("PENDING",), timeout, restarts=restarts)
        time.sleep(1.0)
        _run("scontrol", "update", f"jobid={job_id}", "StartTime=now", env=self.env())

    def signal_batch(self, job_id: int, sig: str) -> None:
        """``scancel --batch --signal=SIG``: what ``--signal=B:SIG@N`` does at the time limit."""
        _run("scancel", "--batch", f"--signal={sig}", str(job_id), env=self.env())

    def requeue(self, job_id: int) -> None:
        """An administrator's ``scontrol requeue``: SIGTERM to every process of the job."""
        _run("scontrol", "requeue", str(job_id), env=self.env())

    def suspend(self, job_id: int) -> None:
        """``scontrol suspend``: SIGSTOP to the job's processes (they keep what they hold)."""
        _run("scontrol", "suspend", str(job_id), env=self.env())

    def resume(self, job_id: int) -> None:
        _run("scontrol", "resume", str(job_id), env=self.env())

    def node_processes(self, index: int) -> list[int]:
        """The live processes in node ``index``'s network namespace (its slurmd included)."""
        return _namespace_pids(self.layout, [index])

    def signal_node_processes(self, index: int, command_part: str, sig: int) -> list[int]:
        """Send ``sig`` to every process in node ``index``'s network namespace whose command line
        contains ``command_part`` (SIGKILL: a crashed node's processes; SIGSTOP: a hung node);
        their PIDs."""
        hit = []
        for pid in self.node_processes(index):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if command_part in cmdline:
                    os.kill(pid, sig)
                    hit.append(pid)
            except OSError:
                continue
        return hit

    # --- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel the jobs, stop the daemons by PID, then :func:`sweep`; ClusterError naming
        anything left behind."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            self._cancel_jobs()
        for key in reversed(list(self.daemons)):
            _terminate(self.daemons[key].pid)
        for proc in self.daemons.values():
            proc.wait()
        self.daemons = {}
        sweep(self.layout)
        left = leftovers(self.layout)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if left:
            raise ClusterError(f"the test cluster left {'; '.join(left)}")

    def _cancel_jobs(self) -> None:
        jobs = _run("squeue", "-h", "-o", "%A", env=self.env(), check=False).stdout.split()
        if jobs:
            _run("scancel", *jobs, env=self.env(), check=False)
            with contextlib.suppress(ClusterError):  # the sweep kills what is left
                _wait_for(lambda: not _run("squeue", "-h", env=self.env(), check=False).stdout.strip(), 20, "", str)


def _wait_for(done, timeout: float, what: str, context) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}\n{context()}")
        time.sleep(0.1)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _terminate(pid: int, grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not process_alive(pid):
            return


def _recorded_pids(layout: ClusterLayout) -> list[int]:
    """The daemons a session of ``layout`` started that still run its programs (a PID in the pids
    file whose command line names the work folder: not a reused PID)."""
    pids_file = layout.work_dir / "pids"
    if not pids_file.exists():
        return []
    pids = []
    for line in pids_file.read_text().splitlines():
        pid = int(line.split()[0])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(layout.work_dir) in cmdline and process_alive(pid):
            pids.append(pid)
    return pids


def _namespace_pids(layout: ClusterLayout, indices: Optional[Sequence[int]] = None) -> list[int]:
    """The live processes in the network namespaces of the nodes ``indices`` (default: all)."""
    pids = []
    for index in range(layout.nodes) if indices is None else indices:
        if (NETNS_DIR / layout.netns(index)).exists():
            pids += [int(p) for p in _run("ip", "netns", "pids", layout.netns(index), check=False).stdout.split()]
    return [pid for pid in pids if process_alive(pid)]


def sweep(layout: ClusterLayout) -> None:
    """Remove everything a cluster of ``layout`` may have left: its daemons (by the PIDs it
    recorded) and every process in its node namespaces are killed, the namespaces, the bridge, the
    hosts lines and the work folder removed. Quiet when there is nothing to remove."""
    for pid in _recorded_pids(layout):
        _terminate(pid, grace=5)
    for pid in _namespace_pids(layout):
        _terminate(pid, grace=0)
    for index in range(layout.nodes):
        if (NETNS_DIR / layout.netns(index)).exists():
            _run("ip", "netns", "del", layout.netns(index), check=False)
        _run("ip", "link", "del", layout.host_veth(index), check=False)
    _run("ip", "link", "del", layout.bridge, check=False)
    _remove_hosts_lines(layout)
    shutil.rmtree(layout.work_dir, ignore_errors=True)


def _remove_hosts_lines(layout: ClusterLayout) -> None:
    text = HOSTS_FILE.read_text()
    kept = [line for line in text.splitlines(keepends=True) if not line.rstrip().endswith(layout.hosts_marker)]
    if len(kept) != len(text.splitlines()):
        HOSTS_FILE.write_text("".join(kept))


def leftovers(layout: ClusterLayout) -> list[str]:
    """What of a cluster of ``layout`` still exists (empty after a clean :meth:`SlurmCluster.stop`)."""
    left = [f"namespace {layout.netns(i)}" for i in range(layout.nodes) if (NETNS_DIR / layout.netns(i)).exists()]
    links = [layout.bridge] + [layout.host_veth(i) for i in range(layout.nodes)]
    left += [f"link {link}" for link in links if Path(f"/sys/class/net/{link}").exists()]
    left += [f"/etc/hosts line {line!r}" for line in HOSTS_FILE.read_text().splitlines() if layout.hosts_marker in line]
    left += [f"process {pid}" for pid in _recorded_pids(layout)]
    left += [f"folder {layout.work_dir}"] if layout.work_dir.exists() else []
    return left


def _hold(layout: ClusterLayout) -> None:
    """Start the cluster, print its daemons' PIDs and slurm.conf as one JSON line, and keep it up
    until SIGTERM or SIGINT; then stop it."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    cluster = SlurmCluster(layout)
    cluster.start()
    try:
        pids = {key: proc.pid for key, proc in cluster.daemons.items()}
        print(json.dumps({"pids": pids, "conf": str(cluster.conf)}), flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="The Slurm test cluster by hand (tests/helpers/slurm_cluster.py).")
    parser.add_argument(
        "action",
        choices=("hold", "down"),
        help="hold: start it and keep it up until SIGTERM/SIGINT; down: remove a leftover cluster",
    )
    default = ClusterLayout()
    parser.add_argument("--name", default=default.name)
    parser.add_argument("--subnet", type=int, default=default.subnet)
    parser.add_argument("--port", type=int, default=default.port)
    args = parser.parse_args(argv)
    layout = ClusterLayout(args.name, args.subnet, args.port)
    if args.action == "hold":
        _hold(layout)
        return 0
    sweep(layout)
    left = leftovers(layout)
    print("\n".join(left) or f"no test cluster {layout.name} left")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
