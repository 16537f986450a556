#!/usr/bin/env bash
# Run a recipe inside the training image (docker/Dockerfile) on this node's GPUs.
#
#   launch/docker.sh recipes/configs/qwen2.5-1.5b.yaml [key=value ...]
#   IMAGE=del-train:latest DATA_DIR=/data RUNS_DIR=/scratch/runs launch/docker.sh RECIPE.yaml
#   DRY_RUN=1 launch/docker.sh RECIPE.yaml        # print the docker command only
#
# Mounts: RUNS_DIR (default ./runs) at /runs - run.output_dir is set to /runs/<recipe name> unless given;
# DATA_DIR (default ./data, if it exists) at /data, read-only - use data=/data/... in overrides;
# HF_CACHE (default ~/.cache/huggingface) at /cache/huggingface - hub models and datasets;
# DEL_CACHE (default ~/.cache/del_core) at /cache/del_core. GPUs: GPUS (default all).
# --ipc=host shares the host's /dev/shm (NCCL, data loaders); locked memory is unlimited (RDMA).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 ]]; then
    echo "usage: $0 RECIPE.yaml [key=value ...]" >&2
    exit 2
fi
RECIPE="$1"
shift

IMAGE="${IMAGE:-del-train:latest}"
GPUS="${GPUS:-all}"
RUNS_DIR="${RUNS_DIR:-$PWD/runs}"
DATA_DIR="${DATA_DIR:-$PWD/data}"
HF_CACHE="${HF_CACHE:-$HOME/.cache/huggingface}"
DEL_CACHE="${DEL_CACHE:-$HOME/.cache/del_core}"
NAME="$(basename "$RECIPE" .yaml)"

# the recipe path inside the image: recipes/configs/... of the image, or a mounted file
case "$RECIPE" in
    recipes/*) INNER_RECIPE="$RECIPE" ;;
    *)
        if [[ ! -f "$RECIPE" ]]; then
            echo "error: recipe $RECIPE does not exist" >&2
            exit 2
        fi
        INNER_RECIPE="/recipe/$(basename "$RECIPE")"
        ;;
esac

ARGS=("run.output_dir=/runs/$NAME")
for arg in "$@"; do ARGS+=("$arg"); done

CMD=(docker run --rm --init
     --gpus "$GPUS"
     --ipc=host --ulimit memlock=-1 --ulimit stack=67108864
     --network=host
     -v "$RUNS_DIR:/runs"
     -v "$HF_CACHE:/cache/huggingface"
     -v "$DEL_CACHE:/cache/del_core")
if [[ -d "$DATA_DIR" ]]; then CMD+=(-v "$DATA_DIR:/data:ro"); fi
if [[ "$INNER_RECIPE" == /recipe/* ]]; then CMD+=(-v "$(cd "$(dirname "$RECIPE")" && pwd):/recipe:ro"); fi
for var in HF_TOKEN WANDB_API_KEY NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_HCA NPROC; do
    if [[ -n "${!var:-}" ]]; then CMD+=(-e "$var"); fi
done
CMD+=("$IMAGE" "$INNER_RECIPE" "${ARGS[@]}")

if [[ -n "${DRY_RUN:-}" ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
mkdir -p "$RUNS_DIR" "$HF_CACHE" "$DEL_CACHE"
echo "[docker] $IMAGE: $INNER_RECIPE ${ARGS[*]} (repo $REPO)"
exec "${CMD[@]}"
