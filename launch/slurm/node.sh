#!/usr/bin/env bash
# One node of a slurm job (started by launch/slurm/train.sbatch through srun): torchrun with this
# node's rank, output to LOG_DIR/node<rank>.log and to the job log.
#
#   node.sh [--print] key=value ...     (--print: write the command and exit)
#
# Reads SLURM_NODEID, NNODES, MASTER_ADDR, MASTER_PORT, GPUS_PER_NODE (0 = CPU with
# CPU_PROCS_PER_NODE processes, gloo), DEL_REPO, LOG_DIR, PYTHON; with DEL_CONTAINER_IMAGE and the
# podman runtime it runs the image's node.sh in the image instead (launch/slurm/container.sh).
#
# Stopping: Slurm delivers a job step's signals to every process of the step (scancel --signal,
# srun's forwarding, the SIGTERM of a requeue, a preemption or a cancel), this script, tee and
# torchrun included. Only the training processes act on USR1/TERM (finish the step, checkpoint,
# stop); tee and torchrun start with both ignored, so the logs survive and torchrun does not kill
# the training processes meanwhile. This script forwards what it gets to them as USR1 as well
# (found in /proc: images need not have pkill).
set -euo pipefail

PRINT=0
if [[ "${1:-}" == --print ]]; then
    PRINT=1
    shift
fi
REPO="${DEL_REPO:?DEL_REPO is unset (node.sh is started by train.sbatch)}"
NODE_RANK="${SLURM_NODEID:?SLURM_NODEID is unset}"
if [[ -n "${DEL_CONTAINER_IMAGE:-}" && "${DEL_CONTAINER_RUNTIME:-}" == podman ]]; then
    # shellcheck source=launch/slurm/container.sh disable=SC1091  # checked on its own too
    source "$REPO/launch/slurm/container.sh"
    # ignored until podman passes them on (an ignored signal stays ignored in the children)
    trap '' USR1 TERM
    exec_node_in_podman "$@"
fi
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi

if [[ "${GPUS_PER_NODE}" -eq 0 ]]; then
    NPROC="${CPU_PROCS_PER_NODE:-1}"
    export DS_ACCELERATOR=cpu
else
    NPROC="$GPUS_PER_NODE"
fi

# --signals-to-handle leaves SIGTERM out: torchrun's handler would stop the training processes
# 30 s after a TERM, whether their checkpoint is written or not (see "Stopping" above).
CMD=("$PYTHON" -m torch.distributed.run
     --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC"
     --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" --signals-to-handle "SIGINT,SIGHUP,SIGQUIT"
     "$REPO/recipes/train.py" "$@")
if [[ "$PRINT" == 1 ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi

mkdir -p "$LOG_DIR"
# An ignored signal stays ignored in the children: tee, torchrun and, until the trainer has
# installed its handlers, the training processes.
trap '' USR1 TERM
exec > >(tee -a "$LOG_DIR/node${NODE_RANK}.log") 2>&1
TEE=$!
echo "[node $NODE_RANK] $(hostname): ${CMD[*]}"

"${CMD[@]}" &
LAUNCHER=$!
# The PIDs of the children of process $1 (read from /proc/PID/stat: the field after the command
# name, which may hold spaces and parentheses, is the state, then the parent's PID).
# shellcheck disable=SC2329  # invoked by forward
children() {
    local stat line pid
    for stat in /proc/[0-9]*/stat; do
        read -r line 2> /dev/null < "$stat" || continue
        read -r _ pid _ <<< "${line##*) }"
        if [[ "$pid" == "$1" ]]; then
            pid="${stat#/proc/}"
            echo "${pid%/stat}"
        fi
    done
}
# shellcheck disable=SC2329  # invoked by the traps
forward() {
    echo "[node $NODE_RANK] $1: forwarding USR1 to the training processes"
    # shellcheck disable=SC2046  # one PID per word
    kill -USR1 $(children "$LAUNCHER") 2> /dev/null || true
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
status=0
while true; do
    wait "$LAUNCHER" && status=0 || status=$?
    if kill -0 "$LAUNCHER" 2> /dev/null; then continue; fi
    break
done
echo "[node $NODE_RANK] torchrun exited $status"
# tee writes the last lines before this script ends (in the image, the container's other processes,
# tee among them, are killed when it does); at most 10 s, should a lost child hold the pipe open.
exec > /dev/null 2>&1
for _ in {1..100}; do
    kill -0 "$TEE" 2> /dev/null || break
    sleep 0.1
done
exit "$status"
