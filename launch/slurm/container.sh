# shellcheck shell=bash
# The training image in a slurm job: sourced by train.sbatch and node.sh (docs/cluster.md, "Inside
# the image"). Unset DEL_CONTAINER_IMAGE: the job trains on the host, as before.
#
#   DEL_CONTAINER_IMAGE    the image every node trains in. podman: a tag in each node's podman storage
#                          (e.g. localhost/del-train:cpu); pyxis: what srun --container-image takes
#                          (a registry image, or a squashfs file made by enroot import)
#   DEL_CONTAINER_RUNTIME  auto (default: pyxis when srun has --container-image, else podman), pyxis
#                          or podman
#   DEL_CONTAINER_MOUNTS   more host folders, space-separated, mounted at their own path: data, a
#                          model folder, a recipe outside the submit folder
#
# The code that runs is the image's (CONTAINER_REPO). Mounted at their own path: the submit folder
# (the working folder, so relative recipe and output paths mean what they mean on the host),
# OUTPUT_DIR, LOG_DIR and DEL_CONTAINER_MOUNTS; DEL_CACHE (default ~/.cache/del_core) at
# /cache/del_core and HF_CACHE (default ~/.cache/huggingface) at /cache/huggingface, as
# launch/docker.sh does. podman: node.sh runs the image's node.sh through launch/docker.sh with the
# host's network; pyxis: srun starts the image's node.sh inside the image itself.

CONTAINER_REPO=/opt/del # docker/Dockerfile's WORKDIR: the project inside the image
CONTAINER_PYTHON=/opt/venv/bin/python

# The runtime DEL_CONTAINER_RUNTIME names (auto resolved), on stdout; an error naming the key and
# status 2 for anything else, or (CHECK=1) when the runtime is missing here.
container_runtime() {
    local runtime="${DEL_CONTAINER_RUNTIME:-auto}" pyxis=0 help
    help="$(srun --help 2> /dev/null || true)" # whole, not piped: grep -q would end srun early (pipefail)
    if [[ "$help" == *--container-image* ]]; then pyxis=1; fi
    case "$runtime" in
        auto) if [[ "$pyxis" == 1 ]]; then runtime=pyxis; else runtime=podman; fi ;;
        pyxis | podman) ;;
        *)
            echo "error: DEL_CONTAINER_RUNTIME=$runtime: use pyxis, podman or auto" >&2
            return 2
            ;;
    esac
    if [[ "${CHECK:-0}" == 1 && "$runtime" == pyxis && "$pyxis" == 0 ]]; then
        echo "error: DEL_CONTAINER_RUNTIME=pyxis, but this srun has no --container-image (pyxis is not installed); use DEL_CONTAINER_RUNTIME=podman" >&2
        return 2
    fi
    if [[ "${CHECK:-0}" == 1 && "$runtime" == podman ]] && ! command -v podman > /dev/null; then
        echo "error: DEL_CONTAINER_RUNTIME=podman (DEL_CONTAINER_IMAGE=$DEL_CONTAINER_IMAGE), but podman is not installed on $(hostname)" >&2
        return 2
    fi
    echo "$runtime"
}

# The host folders mounted at their own path (absolute, each once), one per line.
container_folders() {
    local folder
    # shellcheck disable=SC2086  # DEL_CONTAINER_MOUNTS is a list of folders
    for folder in "$PWD" "$OUTPUT_DIR" "$LOG_DIR" ${DEL_CONTAINER_MOUNTS:-}; do
        realpath -m "$folder"
    done | awk '!seen[$0]++'
}

# pyxis: srun's container options into the array PYXIS_ARGS, and the variables the image's node.sh
# needs exported (srun passes the job's environment into the container, where host values such as
# PYTHON would point nowhere).
pyxis_setup() {
    local mounts=() folder
    while IFS= read -r folder; do mounts+=("$folder:$folder"); done < <(container_folders)
    mounts+=("${DEL_CACHE:-$HOME/.cache/del_core}:/cache/del_core" "${HF_CACHE:-$HOME/.cache/huggingface}:/cache/huggingface")
    local IFS=,
    # shellcheck disable=SC2034  # read by train.sbatch
    PYXIS_ARGS=(--container-image="$DEL_CONTAINER_IMAGE" --container-mounts="${mounts[*]}" --container-workdir="$PWD")
    export DEL_REPO="$CONTAINER_REPO" PYTHON="$CONTAINER_PYTHON" DEL_CACHE_DIR=/cache/del_core
    export HF_HOME=/cache/huggingface TORCH_EXTENSIONS_DIR=/cache/del_core/torch_extensions
}

# podman (from node.sh): exec the image's node.sh with the same arguments through launch/docker.sh
# (PRINT=1: its command, DRY_RUN). Host network: the rendezvous address is the node's own; the
# container keeps the node's hostname. Signals: Slurm signals every process of the step, podman
# among them, and podman passes USR1 and TERM on to the image's node.sh (its --sig-proxy, through
# the --init process), which forwards them to the training processes as on the host. podman runs
# the container as the job's user (RUN_AS), so OUTPUT_DIR stays theirs.
exec_node_in_podman() {
    local folders=() gpus=all dry="" launcher="$DEL_REPO/launch/docker.sh"
    mapfile -t folders < <(container_folders)
    if [[ "$GPUS_PER_NODE" -eq 0 ]]; then gpus=none; fi
    if [[ "${PRINT:-0}" == 1 ]]; then dry=1; else mkdir -p "$OUTPUT_DIR" "$LOG_DIR"; fi
    local forward="SLURM_NODEID NNODES MASTER_ADDR MASTER_PORT GPUS_PER_NODE CPU_PROCS_PER_NODE DEL_REPO LOG_DIR"
    forward+=" DEEPSPEED_TIMEOUT NCCL_TIMEOUT_S TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_IB_DISABLE CUDA_VISIBLE_DEVICES"
    forward+=" TOKENIZERS_PARALLELISM ${FORWARD_ENV:-}"
    DEL_REPO="$CONTAINER_REPO" RUNTIME=podman IMAGE="$DEL_CONTAINER_IMAGE" NETWORK=host GPUS="$gpus" \
        RUN_AS="${RUN_AS:-$(id -u):$(id -g)}" RUNS_DIR=none MOUNTS="${folders[*]}" WORKDIR="$PWD" \
        FORWARD_ENV="$forward" DRY_RUN="$dry" exec "$launcher" -- "$CONTAINER_REPO/launch/slurm/node.sh" "$@"
}
