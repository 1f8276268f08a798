#!/usr/bin/env bash
# Check pyoffload on a real NVIDIA GPU, offline:  bash scripts/gpu_check.sh
#
# Run from the repository root on a machine with an NVIDIA GPU and its driver, with wheelhouse/
# built beforehand by scripts/build_wheelhouse.sh (no network is used).  Steps:
#   1. probe the driver (libcuda.so.1: cuInit, cuDeviceGetCount) under a time limit; no GPU is
#      a clear error, exit 2;
#   2. a virtual environment (with the system's site packages, so that an installed CuPy,
#      cuda-core or matplotlib serves as baseline) with pyoffload, pyoffload-cuda, pycuda and the
#      test tools installed from the wheelhouse (pip --no-index --find-links);
#   3. the CUDA plugin's own tests against the real driver (plugins/cuda/tests);
#   4. the conformance suite on the GPU (PYOFFLOAD_PLUGINS=cuda);
#   5. benchmarks/run.py --only launch alloc memcpy cuda, results in benchmarks/results/.
# Logs and results are copied to $OUT when that variable is set.  Every step runs under a time
# limit (GPU_CHECK_STEP_TIMEOUT seconds, default 900); the exit status is 0 only if all passed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WHEELHOUSE=${WHEELHOUSE:-$ROOT/wheelhouse}
VENV=${GPU_CHECK_VENV:-${TMPDIR:-/tmp}/pyoffload-gpu-check}
STEP_TIMEOUT=${GPU_CHECK_STEP_TIMEOUT:-900}
PY=${PYTHON:-python3}
RESULTS=$ROOT/benchmarks/results
LOGS=$RESULTS/gpu-check
mkdir -p "$LOGS"

die() {  # $1: exit status, rest: message
    local rc=$1; shift
    echo "gpu_check: $*" >&2
    echo "gpu_check: $*" >"$LOGS/summary.txt"
    copy_out
    exit "$rc"
}

copy_out() {
    [ -n "${OUT:-}" ] || return 0
    mkdir -p "$OUT"
    local f
    for f in "$LOGS"/*.txt "$LOGS"/*.log "$RESULTS/results.json" "$RESULTS/results.md" "$RESULTS/alloc_cuda.png"; do
        [ -f "$f" ] && cp "$f" "$OUT"/
    done
    return 0
}

# -- 1. is there a GPU? -----------------------------------------------------------------------
probe=$(timeout 60 "$PY" - <<'PY' 2>&1
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    sys.exit(f"no NVIDIA GPU: the driver library libcuda.so.1 cannot be loaded ({exc})")
rc = cuda.cuInit(0)
if rc != 0:
    sys.exit(f"no NVIDIA GPU: cuInit failed with CUresult {rc}")
n = ctypes.c_int(0)
rc = cuda.cuDeviceGetCount(ctypes.byref(n))
if rc != 0 or n.value == 0:
    sys.exit(f"no NVIDIA GPU: the driver reports {n.value} devices (CUresult {rc})")
name = ctypes.create_string_buffer(256)
cuda.cuDeviceGetName(name, 256, 0)
print(f"{n.value} CUDA device(s); device 0: {name.value.decode()}")
PY
)
case $? in
    0) echo "gpu_check: $probe" ;;
    124) die 2 "no NVIDIA GPU: the driver probe did not answer within 60 s" ;;
    *) die 2 "$probe" ;;
esac
command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi -L >"$LOGS/nvidia-smi.txt" 2>&1

# -- 2. the environment, from the wheelhouse only -------------------------------------------------
[ -d "$WHEELHOUSE" ] || die 3 "$WHEELHOUSE is missing: build it with scripts/build_wheelhouse.sh where there is network"
tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
ls "$WHEELHOUSE"/pyoffload-*-"$tag"-*.whl >/dev/null 2>&1 \
    || die 3 "the wheelhouse has no pyoffload wheel for $tag ($("$PY" --version)); it holds: $(ls "$WHEELHOUSE" | tr '\n' ' ')"
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV" || die 3 "cannot create a virtual environment at $VENV"
VPY=$VENV/bin/python
pip_install() {
    timeout "$STEP_TIMEOUT" "$VPY" -m pip install -q --no-index --no-cache-dir --find-links "$WHEELHOUSE" "$@"
}
pip_install pyoffload pyoffload-cuda pycuda pytest hypothesis >"$LOGS/install.log" 2>&1 \
    || die 3 "installing from the wheelhouse failed (see install.log): $(tail -3 "$LOGS/install.log")"
for optional in "cuda-core:the cuda.core baselines are skipped" "matplotlib:the plots are not drawn"; do
    name=${optional%%:*}
    "$VPY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$name" 2>/dev/null && continue
    pip_install "$name" >>"$LOGS/install.log" 2>&1 \
        || echo "gpu_check: $name is installed neither here nor in the wheelhouse: ${optional#*:}"
done
"$VPY" -c "import cupy" 2>/dev/null || echo "gpu_check: CuPy is not installed here: the alloc+free baseline against its pool is skipped"

# -- 3..5. tests and benchmarks ------------------------------------------------------------------
unset PYOFFLOAD_CUDA_DRIVER PYOFFLOAD_DEVICES
status=0
summary=()
step() {  # $1: name (log file), rest: command
    local name=$1; shift
    echo "gpu_check: [$name] $*"
    timeout "$STEP_TIMEOUT" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    local last; last=$(grep -E '(passed|failed|error|skipped|figures)' "$LOGS/$name.log" | tail -1)
    [ $rc -eq 124 ] && last="timed out after $STEP_TIMEOUT s"
    summary+=("$name: exit $rc${last:+ — $last}")
    echo "gpu_check: [$name] exit $rc${last:+ — $last}"
    [ $rc -eq 0 ] || status=1
}
step cuda-plugin-tests "$VPY" -m pytest -q -p no:cacheprovider plugins/cuda/tests
step conformance env PYOFFLOAD_PLUGINS=cuda "$VPY" -m pytest -q -p no:cacheprovider -p pyoffload.testing \
    --pyargs pyoffload.conformance
step benchmarks "$VPY" benchmarks/run.py --only launch alloc memcpy cuda --out "$RESULTS"

printf '%s\n' "${summary[@]}" | tee "$LOGS/summary.txt"
copy_out
exit $status
