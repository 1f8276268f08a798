#!/usr/bin/env bash
# Build wheelhouse/: everything scripts/gpu_check.sh installs on a GPU machine that has no network.
#
#   bash scripts/build_wheelhouse.sh            # from the repository root, on a machine with network,
#                                              # a CUDA toolkit (nvcc, cuda.h) and a C++ compiler
#
# Contents, for CPython 3.11 and 3.12 (each Python found here: python3.X on PATH or under pyenv;
# PYTHON311 / PYTHON312 override):
#   * wheels of pyoffload (it has a C extension: one per Python), pyoffload-cuda, and pycuda
#     (built by plugins/cuda/tools/build_pycuda.sh against the toolkit, linked to libcuda.so.1);
#   * the dependencies' binary wheels (pip download --only-binary :all:), in priority order:
#     what pyoffload and pycuda need at run time, the test tools, cuda-core/cuda-bindings, then
#     matplotlib; a group that would take the total over the budget is left out and listed;
#   * cuda-kernels/bench_kernels.ptx, the CUDA benchmarks' kernels (the GPU machine may lack nvcc);
#   * MANIFEST.txt: what is in it, its size, and what was left out and why.
# CuPy is never carried (its wheel alone is over 100 MiB): gpu_check.sh uses it only where it is
# already installed.  WHEELHOUSE_BUDGET_MIB (default 56) bounds the total, leaving room for the
# repository itself within a 64 MiB transfer.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${WHEELHOUSE:-$ROOT/wheelhouse}
BUDGET=$(( ${WHEELHOUSE_BUDGET_MIB:-56} * 1024 * 1024 ))
CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

rm -rf "$OUT"
mkdir -p "$OUT"
left_out=()

find_python() {  # $1: 3.11 or 3.12; prints an interpreter of that version or nothing
    local v=$1 var="PYTHON${1/./}" cand
    if [ -n "${!var:-}" ]; then echo "${!var}"; return; fi
    for cand in "python$v" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import venv, ensurepip" 2>/dev/null; then
            command -v "$cand"; return
        fi
    done
}

size_of() { du -cb "$@" 2>/dev/null | tail -1 | cut -f1; }

total() { size_of "$OUT"; }

# Add the wheels of one download group if the total stays within budget; else record it.
add_group() {  # $1: label, $2: directory of downloaded wheels
    local label=$1 dir=$2 new=() f
    for f in "$dir"/*.whl; do
        [ -e "$f" ] || continue
        [ -e "$OUT/$(basename "$f")" ] || new+=("$f")
    done
    [ ${#new[@]} -gt 0 ] || { echo "  $label: nothing new"; return; }
    local add; add=$(size_of "${new[@]}")
    if [ $(( $(total) + add )) -le "$BUDGET" ]; then
        mv "${new[@]}" "$OUT"/
        echo "  $label: ${#new[@]} wheels, $(( add / 1024 )) KiB"
    else
        left_out+=("$label ($(( add / 1024 / 1024 )) MiB: over the ${WHEELHOUSE_BUDGET_MIB:-56} MiB budget)")
        echo "  $label: LEFT OUT ($(( add / 1024 )) KiB would exceed the budget)"
    fi
}

download() {  # $1: python version (3.12), $2: label, rest: requirements
    local v=$1 label=$2; shift 2
    local dir="$WORK/dl-$v-${label// /_}" plat=()
    for p in "${PLATFORMS[@]}"; do plat+=(--platform "$p"); done
    mkdir -p "$dir"
    if "$HOST_PY" -m pip download -q --only-binary :all: --python-version "$v" --implementation cp \
            "${plat[@]}" -d "$dir" "$@" 2>"$dir.log"; then
        add_group "$label (cp${v/./})" "$dir"
    else
        left_out+=("$label (cp${v/./}): pip download failed: $(tail -1 "$dir.log")")
        echo "  $label (cp${v/./}): download failed: $(tail -1 "$dir.log")"
    fi
}

HOST_PY=$(command -v python3)
versions=()
for v in 3.12 3.11; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        left_out+=("everything for cp${v/./}: no Python $v on this machine")
        continue
    fi
    versions+=("$v")
    echo "== Python $v: $py"
    "$py" -m venv "$WORK/venv-$v"
    vpy="$WORK/venv-$v/bin/python"
    "$vpy" -m pip install -q --upgrade pip setuptools wheel
    # pyoffload (C extension) for this Python; the plugin is pure Python, built once below.
    "$vpy" -m pip wheel -q --no-deps -w "$OUT" "$ROOT"
    # pycuda through the CUDA plugin's own tool (its cache makes a second run take seconds).
    cuda_version=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$CUDA_ROOT/include/cuda.h")
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/pyoffload-cuda/wheels/cuda-$cuda_version
    PYTHON="$vpy" CUDA_ROOT="$CUDA_ROOT" PYCUDA_WHEEL_CACHE="$cache" \
        bash "$ROOT/plugins/cuda/tools/build_pycuda.sh"
    tag=cp${v/./}
    cp "$(ls -t "$cache"/pycuda-*-"$tag"-"$tag"-*.whl | head -1)" "$OUT"/
done
"$HOST_PY" -m pip wheel -q --no-deps -w "$OUT" "$ROOT/plugins/cuda"

echo "== CUDA benchmark kernels"
"$HOST_PY" "$ROOT/benchmarks/_cuda_kernels.py" --out "$OUT/cuda-kernels"

echo "== dependencies (budget $(( BUDGET / 1024 / 1024 )) MiB; $(( $(total) / 1024 )) KiB so far)"
# Priority: run time of pyoffload and pycuda, then the tests, then the optional baselines and plots.
for v in "${versions[@]}"; do
    download "$v" "run-time dependencies" numpy pluggy structlog pyelftools platformdirs pytools mako
done
for v in "${versions[@]}"; do
    download "$v" "test tools" pytest hypothesis
done
for v in "${versions[@]}"; do
    download "$v" "cuda-core and cuda-bindings" cuda-core cuda-bindings
done
for v in "${versions[@]}"; do
    download "$v" "matplotlib" matplotlib
done
left_out+=("cupy (cupy-cuda13x: over 100 MiB per wheel; gpu_check.sh uses CuPy only where already installed)")

{
    echo "wheelhouse built $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "total: $(( $(total) / 1024 )) KiB (budget $(( BUDGET / 1024 )) KiB)"
    echo
    echo "contents:"
    (cd "$OUT" && find . -type f ! -name MANIFEST.txt -printf '  %P %s\n' | sort)
    echo
    echo "left out:"
    for l in "${left_out[@]}"; do echo "  $l"; done
} >"$OUT/MANIFEST.txt"
cat "$OUT/MANIFEST.txt"
