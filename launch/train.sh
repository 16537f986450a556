#!/usr/bin/env bash
# Single-node launcher: one process per GPU (or N CPU processes), any recipe and overrides.
#
#   launch/train.sh recipes/configs/qwen2.5-1.5b.yaml [key=value ...]     # all GPUs of this node
#   NPROC=4 launch/train.sh recipes/configs/qwen2.5-1.5b.yaml              # 4 GPUs
#   DEVICE=cpu NPROC=2 launch/train.sh recipes/configs/tiny.yaml           # CPU, 2 processes (gloo)
#   DRY_RUN=1 launch/train.sh ...                                          # print the command only
#
# Variables: NPROC (default: GPUs visible to nvidia-smi, 1 on CPU), DEVICE (gpu|cpu; default gpu
# when nvidia-smi lists a GPU), PYTHON (default: .venv/bin/python if present, else python3),
# MASTER_PORT (default: a free one; torchrun --standalone picks it).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 ]]; then
    echo "usage: $0 RECIPE.yaml [key=value ...]" >&2
    exit 2
fi

gpu_count() {
    if command -v nvidia-smi > /dev/null 2>&1; then
        nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true
    else
        echo 0
    fi
}

GPUS="$(gpu_count)"
DEVICE="${DEVICE:-$([[ "$GPUS" -gt 0 ]] && echo gpu || echo cpu)}"
if [[ "$DEVICE" == cpu ]]; then
    NPROC="${NPROC:-1}"
    export DS_ACCELERATOR=cpu
    CORES="$(nproc)"
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( CORES / NPROC > 0 ? CORES / NPROC : 1 ))}"
else
    NPROC="${NPROC:-$GPUS}"
    if [[ "$NPROC" -lt 1 ]]; then
        echo "error: DEVICE=gpu but no GPU is visible (nvidia-smi -L); use DEVICE=cpu" >&2
        exit 2
    fi
fi

if [[ -n "${PYTHON:-}" ]]; then
    :
elif [[ -x "$REPO/.venv/bin/python" ]]; then
    PYTHON="$REPO/.venv/bin/python"
else
    PYTHON=python3
fi

CMD=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" "$REPO/recipes/train.py" "$@")
if [[ -n "${DRY_RUN:-}" ]]; then
    printf '%q ' "${CMD[@]}"
    echo
    exit 0
fi
echo "[launch] $NPROC process(es) on $DEVICE: ${CMD[*]}"
exec "${CMD[@]}"
