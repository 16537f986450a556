#!/usr/bin/env bash
# The training image's entry point (docker/Dockerfile).
#
#   IMAGE --version                  the stack's versions: the line of the image's label org.del.versions
#   IMAGE RECIPE.yaml [key=value ...] launch/train.sh: one process per GPU (NPROC; DEVICE=cpu on CPU)
#   IMAGE COMMAND [ARG ...]          any command in /opt/del: python recipes/evaluate.py ..., bash, ...
#
# Runs as any user id (docker run --user UID:GID, podman --userns=keep-id): when HOME is not writable
# for it, HOME becomes a fresh folder under /tmp (torch, transformers and matplotlib write there), and
# USER is set when the id has no name here (getpass asks for it).
set -euo pipefail

if [[ ! -w "${HOME:-/nonexistent}" ]]; then
    HOME="$(mktemp -d /tmp/home-XXXXXX)"
    export HOME
fi
if [[ -z "${USER:-}" ]]; then
    USER="$(id -un 2> /dev/null || echo "uid$(id -u)")"
    export USER
fi
case "${1:-}" in
    --version) exec python -m del_core.console.versions ;;
    *.yaml | *.yml) exec /opt/del/launch/train.sh "$@" ;;
    "")
        echo "usage: IMAGE --version | RECIPE.yaml [key=value ...] | COMMAND [ARG ...]" >&2
        exit 2
        ;;
    *) exec "$@" ;;
esac
