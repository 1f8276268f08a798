#!/usr/bin/env bash
# Build and install pycuda from its sdist on a machine that has the CUDA toolkit but no driver.
#
# pycuda's extension links against libcuda.so.  Without a driver there is none, so we generate a
# link-time stand-in from the toolkit's cuda.h (see gen_libcuda_stub.py) in a scratch directory
# that is never on the loader's path.  The installed extension keeps DT_NEEDED libcuda.so.1: on
# a GPU machine it binds to the real driver; here `import pycuda.driver` fails with the loader's
# own reason, which pyoffload-cuda reports as "no devices: <reason>".
#
# Environment: CUDA_ROOT (default /usr/local/cuda), PYCUDA_VERSION (default: latest sdist),
# PYTHON (default python3).  Needs a C++ compiler.  Takes a few minutes (bundled Boost.Python).
set -euo pipefail

CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [ ! -f "$CUDA_ROOT/include/cuda.h" ]; then
    echo "build_pycuda: $CUDA_ROOT/include/cuda.h not found (set CUDA_ROOT)" >&2
    exit 1
fi

# 1. The link-time stand-in for libcuda.so.1.
mkdir -p "$WORK/stub"
"$PYTHON" "$HERE/gen_libcuda_stub.py" "$CUDA_ROOT" "$WORK/stub/libcuda_stub.c"
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$WORK/stub/libcuda.so" "$WORK/stub/libcuda_stub.c"

# 2. pycuda's sdist (pip's ordinary client; only pycuda itself from source).
spec=pycuda${PYCUDA_VERSION:+==$PYCUDA_VERSION}
"$PYTHON" -m pip download --no-deps --no-binary pycuda -d "$WORK/sdist" "$spec"
tar -xzf "$WORK"/sdist/pycuda-*.tar.gz -C "$WORK"
src=$(echo "$WORK"/pycuda-*/)

# 3. Configure: the stand-in directory is the only driver library directory; CURAND is not part
#    of a bare toolkit install and pyoffload does not use it.
(cd "$src" && "$PYTHON" configure.py \
    --cuda-root="$CUDA_ROOT" \
    --cudadrv-lib-dir="$WORK/stub" \
    --no-cuda-enable-curand)

# 4. Build and install.  No rpath to the stand-in is recorded (checked below).
"$PYTHON" -m pip install --no-deps "$src"
"$PYTHON" -m pip install pytools platformdirs mako

# 5. The installed extension must need libcuda.so.1 and must not point at the scratch directory.
ext=$("$PYTHON" - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("pycuda")
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("_driver*.so")))
PY
)
readelf -d "$ext" | grep -q 'NEEDED.*libcuda.so.1' || { echo "build_pycuda: $ext lacks DT_NEEDED libcuda.so.1" >&2; exit 1; }
if readelf -d "$ext" | grep -E 'R(UN)?PATH' | grep -q "$WORK"; then
    echo "build_pycuda: $ext records the stand-in directory in its rpath" >&2; exit 1
fi
echo "build_pycuda: installed $ext (links libcuda.so.1, resolved at run time by the real driver)"
