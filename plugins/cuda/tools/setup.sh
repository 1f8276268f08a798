#!/usr/bin/env bash
# Run by the repository's scripts/setup.sh (inside its virtual environment) before the plugin is
# installed: builds pycuda when a CUDA toolkit is present and pycuda is not installed yet.
set -euo pipefail
PYTHON=${PYTHON:-python}
CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
if "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('pycuda') is None)"; then
    exit 0
fi
if [ ! -f "$CUDA_ROOT/include/cuda.h" ] || ! command -v c++ >/dev/null; then
    echo "pyoffload-cuda: no CUDA toolkit at $CUDA_ROOT or no C++ compiler: not building pycuda" \
         "(the plugin then reports 'no devices'; the fake driver still works)" >&2
    exit 0
fi
PYTHON="$PYTHON" CUDA_ROOT="$CUDA_ROOT" bash "$(dirname "$0")/build_pycuda.sh"
