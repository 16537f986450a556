#!/usr/bin/env bash
# Run a recipe, or any command, inside the training image (docker/Dockerfile).
#
#   launch/docker.sh recipes/configs/qwen2.5-1.5b.yaml [key=value ...]   # launch/train.sh in the image
#   launch/docker.sh -- python recipes/evaluate.py smollm2 ...           # any command in /opt/del
#   IMAGE=del-train:latest DATA_DIR=/data RUNS_DIR=/scratch/runs launch/docker.sh RECIPE.yaml
#   DRY_RUN=1 launch/docker.sh RECIPE.yaml        # print the container command only
#
# RUNTIME: docker or podman (default: docker when installed, else podman). IMAGE (default
# del-train:latest). GPUS (default all; none on a CPU image: no --gpus, no memlock/stack limits).
# Mounts: RUNS_DIR (default ./runs; none: not mounted) at /runs - run.output_dir is /runs/<recipe
# name> unless given; MOUNTS: host folders (space-separated) at their own path, read-write (a slurm
# node's submit and output folders, launch/slurm/container.sh); WORKDIR: the working folder inside
# (default /opt/del);
# DATA_DIR (default ./data, if it exists) at /data, read-only - use data=/data/... in overrides;
# HF_CACHE (default ~/.cache/huggingface) at /cache/huggingface - hub models and datasets;
# DEL_CACHE (default ~/.cache/del_core) at /cache/del_core - converted tokenizers and models, and
# the torch extensions DeepSpeed compiles at first use (compiled once, not in every container).
# User: the container runs as you (docker --user UID:GID; podman as non-root: --userns=keep-id), so
# what it writes is yours; as root, as the image's non-root user del (uid 1000) unless RUN_AS=UID:GID.
# SANDBOX_NAMESPACES=1 lets bubblewrap create its namespaces inside (evaluate.py's sandbox of
# generated programs): podman --security-opt unmask=/proc/*; docker the equivalent systempaths and
# seccomp options (docs/docker.md). NETWORK (default host). FORWARD_ENV: more variable names to pass.
# --ipc=host shares the host's /dev/shm (NCCL, gloo, data loaders); with GPUs, locked memory is
# unlimited (RDMA).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 ]]; then
    echo "usage: $0 RECIPE.yaml [key=value ...] | $0 -- COMMAND [ARG ...]" >&2
    exit 2
fi

if [[ -z "${RUNTIME:-}" ]]; then
    if command -v docker > /dev/null || ! command -v podman > /dev/null; then RUNTIME=docker; else RUNTIME=podman; fi
fi
IMAGE="${IMAGE:-del-train:latest}"
GPUS="${GPUS:-all}"
NETWORK="${NETWORK:-host}"
RUNS_DIR="${RUNS_DIR:-$PWD/runs}"
DATA_DIR="${DATA_DIR:-$PWD/data}"
HF_CACHE="${HF_CACHE:-$HOME/.cache/huggingface}"
DEL_CACHE="${DEL_CACHE:-$HOME/.cache/del_core}"

# what runs inside: a recipe (recipes/... of the image, or a mounted file) through launch/train.sh,
# or the command after --
INNER=()
RECIPE_DIR=""
if [[ "$1" == -- ]]; then
    shift
    if [[ $# -lt 1 ]]; then
        echo "error: no command after --" >&2
        exit 2
    fi
    INNER=("$@")
else
    RECIPE="$1"
    shift
    case "$RECIPE" in
        recipes/*) INNER_RECIPE="$RECIPE" ;;
        *)
            if [[ ! -f "$RECIPE" ]]; then
                echo "error: recipe $RECIPE does not exist" >&2
                exit 2
            fi
            INNER_RECIPE="/recipe/$(basename "$RECIPE")"
            RECIPE_DIR="$(cd "$(dirname "$RECIPE")" && pwd)"
            ;;
    esac
    INNER=("$INNER_RECIPE" "run.output_dir=/runs/$(basename "$RECIPE" .yaml)" "$@")
fi

CMD=("$RUNTIME" run --rm --init --ipc=host "--network=$NETWORK")
if [[ "$GPUS" != none ]]; then
    CMD+=(--gpus "$GPUS" --ulimit memlock=-1 --ulimit stack=67108864)
fi
CALLER="$(id -u):$(id -g)"
if [[ -z "${RUN_AS:-}" && "$(id -u)" != 0 ]]; then RUN_AS="$CALLER"; fi
if [[ -n "${RUN_AS:-}" ]]; then
    # rootless podman maps the caller to itself with keep-id (--user alone would be a sub-uid)
    if [[ "$RUNTIME" == podman && "$(id -u)" != 0 && "$RUN_AS" == "$CALLER" ]]; then
        CMD+=(--userns=keep-id)
    else
        CMD+=(--user "$RUN_AS")
    fi
fi
if [[ -n "${SANDBOX_NAMESPACES:-}" ]]; then
    if [[ "$RUNTIME" == podman ]]; then
        CMD+=(--security-opt "unmask=/proc/*")
    else
        CMD+=(--security-opt systempaths=unconfined --security-opt seccomp=unconfined --security-opt apparmor=unconfined)
    fi
fi
if [[ "$RUNS_DIR" != none ]]; then CMD+=(-v "$RUNS_DIR:/runs"); fi
CMD+=(-v "$HF_CACHE:/cache/huggingface" -v "$DEL_CACHE:/cache/del_core")
# shellcheck disable=SC2086  # MOUNTS is a list of folders
for folder in ${MOUNTS:-}; do CMD+=(-v "$folder:$folder"); done
if [[ -n "${WORKDIR:-}" ]]; then CMD+=(--workdir "$WORKDIR"); fi
if [[ -d "$DATA_DIR" ]]; then CMD+=(-v "$DATA_DIR:/data:ro"); fi
if [[ -n "$RECIPE_DIR" ]]; then CMD+=(-v "$RECIPE_DIR:/recipe:ro"); fi
# shellcheck disable=SC2206  # FORWARD_ENV is a list of names
NAMES=(HF_TOKEN WANDB_API_KEY NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_HCA NPROC DEVICE OMP_NUM_THREADS
       DEL_SANDBOX_ACCEPT_BASIC ${FORWARD_ENV:-})
for var in "${NAMES[@]}"; do
    if [[ -n "${!var:-}" ]]; then CMD+=(-e "$var"); fi
done
CMD+=("$IMAGE" "${INNER[@]}")

if [[ -n "${DRY_RUN:-}" ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
if [[ "$RUNS_DIR" != none ]]; then mkdir -p "$RUNS_DIR"; fi
mkdir -p "$HF_CACHE" "$DEL_CACHE"
echo "[docker] $RUNTIME $IMAGE: ${INNER[*]} (repo $REPO)"
exec "${CMD[@]}"
