#!/usr/bin/env bash
# Set up everything pyoffload needs on a fresh Debian machine, idempotently:
# system packages (PoCL, OpenCL loader, C/C++ compilers for host images and the pycuda build,
# clang/lld for amdgcn images, Open MPI for pyoffload-mpi and its mpi4py build),
# a virtual environment at .venv with pyoffload, its test tools and every plugin in plugins/.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo gcc g++ binutils clang-15 lld-15 llvm-15 \
           openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
python -m pip install -q -e ".[test,docs]"
# PyTorch's CPU build for the DLPack interop tests (a local wheel on these machines; the tests
# skip where it cannot be installed).
python -m pip install -q torch==2.13.0 >/dev/null 2>&1 || echo "setup: torch 2.13.0 not installable here; the torch interop tests will skip" >&2

# Each plugin is its own distribution; a plugin may ship tools/setup.sh for what pip cannot do.
for plugin in plugins/*/; do
  [ -f "$plugin/pyproject.toml" ] || continue
  if [ -x "$plugin/tools/setup.sh" ]; then
    "$plugin/tools/setup.sh"
  fi
  python -m pip install -q -e "$plugin"
done

# Python 3.12 and 3.13 environments for the matrix rows that run the core and OpenCL tests on
# every supported interpreter (pyenv provides them; the C extension builds for each).
for v in 3.12 3.13; do
  py=""
  if command -v pyenv >/dev/null; then
    py=$(ls -d "$(pyenv root)"/versions/"$v".*/bin/python 2>/dev/null | sort -V | tail -n 1)
  fi
  if [ -z "$py" ] && "python$v" -c pass 2>/dev/null; then
    py=$(command -v "python$v")
  fi
  if [ -z "$py" ]; then
    echo "setup: Python $v not found (install it, e.g. pyenv install $v)" >&2
    exit 1
  fi
  [ -x ".venv-$v/bin/python" ] || "$py" -m venv ".venv-$v"
  ".venv-$v/bin/python" -m pip install -q --upgrade pip >/dev/null
  ".venv-$v/bin/python" -m pip install -q -e ".[test]" -e plugins/opencl
done

# Byte-compile the project's sources for each interpreter, as a wheel install does: editable
# installs leave that to the first import, which never writes the .pyc files where
# PYTHONDONTWRITEBYTECODE is set, so every process would compile every module again.
for py in .venv/bin/python .venv-3.12/bin/python .venv-3.13/bin/python; do
  "$py" -m compileall -q core plugins/*/pyoffload_* docs/example_backend >/dev/null
done
