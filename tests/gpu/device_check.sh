#!/usr/bin/env bash
# The device check in one command (tests/gpu/README.md):
#   bash tests/gpu/device_check.sh [--smoke] [--out DIR] [--sections a,b] [--budget-s S]
# Python: $DEVICE_CHECK_PYTHON, else .venv/bin/python when the checkout has one, else python3 (a GPU
# machine's own PyTorch).
# Where that Python cannot import omegaconf and deepspeed, the wheels staged by
# tests/gpu/stage_offline.py (tests/gpu/_offline/wheels) are installed into /tmp/site first.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${DEVICE_CHECK_PYTHON:-python3}"
if [[ -z "${DEVICE_CHECK_PYTHON:-}" && -x .venv/bin/python ]]; then
    PY=.venv/bin/python
fi
if ! "$PY" -c "import omegaconf, deepspeed" 2>/dev/null && compgen -G "tests/gpu/_offline/wheels/*.whl" >/dev/null; then
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        tests/gpu/_offline/wheels/*.whl; then
        export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    else
        echo "warning: the carried wheels did not install; sections that need them will fail" >&2
    fi
fi
if [[ -z "${DEL_SHARED_DIR:-}" && -d ../shared/vocab ]]; then
    DEL_SHARED_DIR="$(cd ../shared && pwd)"
    export DEL_SHARED_DIR
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
exec "$PY" tests/gpu/device_check.py "$@"
