#!/usr/bin/env bash
# Build and install pycuda from its sdist on a machine that has the CUDA toolkit but no driver.
#
# pycuda's extension links against libcuda.so.  Without a driver there is none (and this toolkit
# ships no lib64/stubs), so we generate a link-time stand-in from the toolkit's own cuda.h (see
# gen_libcuda_stub.py) in a scratch directory that is never on the loader's path.  The installed
# extension keeps DT_NEEDED libcuda.so.1: on a GPU machine it binds to the real driver; here
# `import pycuda.driver` fails with the loader's own reason, which pyoffload-cuda reports as
# "no devices: <reason>".
#
# The built wheel is cached (PYCUDA_WHEEL_CACHE, default ~/.cache/pyoffload-cuda/wheels/cuda-<v>)
# so that later runs on the same machine install in seconds.
#
# Environment: CUDA_ROOT (default /usr/local/cuda), PYCUDA_VERSION (default: latest sdist),
# PYTHON (default python3).  Needs a C++ compiler.  A cold build takes about 4 minutes on 2 cores.
set -euo pipefail

CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ ! -f "$CUDA_ROOT/include/cuda.h" ]; then
    echo "build_pycuda: $CUDA_ROOT/include/cuda.h not found (set CUDA_ROOT)" >&2
    exit 1
fi
cuda_version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$CUDA_ROOT/include/cuda.h")
CACHE=${PYCUDA_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyoffload-cuda/wheels/cuda-$cuda_version}
spec=pycuda${PYCUDA_VERSION:+==$PYCUDA_VERSION}

# pycuda's run-time dependencies (installed normally; pycuda itself goes in with --no-deps).
"$PYTHON" -m pip install -q pytools platformdirs mako

if "$PYTHON" -m pip install -q --no-deps --no-index --find-links "$CACHE" "$spec" 2>/dev/null; then
    echo "build_pycuda: installed a cached wheel from $CACHE"
else
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT

    # 1. The link-time stand-in for libcuda.so.1.
    mkdir -p "$WORK/stub"
    "$PYTHON" "$HERE/gen_libcuda_stub.py" "$CUDA_ROOT" "$WORK/stub/libcuda_stub.c"
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$WORK/stub/libcuda.so" "$WORK/stub/libcuda_stub.c"

    # 2. pycuda's sdist (pip's ordinary client; only pycuda itself from source).
    "$PYTHON" -m pip download -q --no-deps --no-binary pycuda -d "$WORK/sdist" "$spec"
    tar -xzf "$WORK"/sdist/pycuda-*.tar.gz -C "$WORK"
    src=$(echo "$WORK"/pycuda-*/)

    # 3. Configure: the stand-in directory is the only driver library directory; CURAND is not
    #    part of a bare toolkit install and pyoffload does not use it.
    (cd "$src" && "$PYTHON" configure.py \
        --cuda-root="$CUDA_ROOT" \
        --cudadrv-lib-dir="$WORK/stub" \
        --no-cuda-enable-curand >/dev/null)

    # 4. Build the wheel into the cache, then install it.
    mkdir -p "$CACHE"
    "$PYTHON" -m pip wheel -q --no-deps -w "$CACHE" "$src"
    "$PYTHON" -m pip install -q --no-deps --no-index --find-links "$CACHE" "$spec"
fi

# 5. The installed extension must need libcuda.so.1 and must not point at a scratch directory.
ext=$("$PYTHON" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("pycuda")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("_driver*.so")))
PY
)
readelf -d "$ext" | grep -q 'NEEDED.*libcuda.so.1' || { echo "build_pycuda: $ext lacks DT_NEEDED libcuda.so.1" >&2; exit 1; }
if readelf -d "$ext" | grep -qE 'R(UN)?PATH'; then
    echo "build_pycuda: $ext records an rpath: $(readelf -d "$ext" | grep -E 'R(UN)?PATH')" >&2; exit 1
fi
echo "build_pycuda: installed $ext (links libcuda.so.1, resolved at run time by the real driver)"
