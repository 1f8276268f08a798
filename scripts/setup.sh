#!/usr/bin/env bash
# Set up what pyoffload's commands need on a fresh Debian machine, idempotently.
#
#   bash scripts/setup.sh --demo   what scripts/demo.sh needs: system packages (PoCL and the OpenCL
#                                  loader, C/C++ compilers for host images and the pycuda build,
#                                  clang/lld for amdgcn images, Open MPI for pyoffload-mpi and its
#                                  mpi4py build), a virtual environment in .venv with pyoffload and
#                                  every plugin in plugins/
#   bash scripts/setup.sh --test   (the default) the same, plus the test and documentation tools,
#                                  PyTorch's CPU build for the interop tests, and .venv-3.12 and
#                                  .venv-3.13 for the matrix rows on those interpreters, where
#                                  Python 3.12/3.13 exist (pyenv, or python3.X on PATH); where one
#                                  does not, its rows are reported as not run; and .venv-pure,
#                                  pyoffload installed as without a C compiler (on 3.12 or 3.13),
#                                  for the rows that run the same source interpreted
#
# One line per step with its time; what the steps print goes to build/setup.log (SETUP_LOG
# overrides).  A pip install is skipped when nothing it depends on changed: each environment keeps
# a stamp per distribution (in <venv>/.setup-stamps) of the interpreter, the distribution's build
# files (pyproject.toml, setup.py, MANIFEST.in) and compiled sources (C, and the modules setup.py
# compiles with Cython), with the version that got installed; the step runs again when any of them
# differs, or when the installed version is not the one recorded.  Installs are editable: changes
# to the other .py files need no new set-up.
# PYTHON picks the interpreter that creates .venv (default python3).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

MODE=test
for arg in "$@"; do
  case "$arg" in
    --demo) MODE=demo ;;
    --test) MODE=test ;;
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument $arg (use --demo or --test)" >&2; exit 2 ;;
  esac
done

LOG=${SETUP_LOG:-build/setup.log}
mkdir -p "$(dirname "$LOG")"
: >"$LOG"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
START=$(date +%s%N)
STEP=""
STEP_START=$START

ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
seconds() { printf '%d.%d s' $(( $1 / 1000 )) $(( $1 % 1000 / 100 )); }
begin() { STEP=$1; STEP_START=$(date +%s%N); printf '\n=== %s\n' "$STEP" >>"$LOG"; }
done_() { printf 'setup: %-36s %-34s %8s\n' "$STEP" "$1" "$(seconds "$(ms_since "$STEP_START")")"; }
run() { "$@" >>"$LOG" 2>&1; }
failed() {
  local status=$?
  [ "$BASHPID" = "$$" ] || exit "$status"  # a subshell: its parent reports the step
  trap - ERR
  printf 'setup: %-36s FAILED (exit status %d); the end of %s:\n' "$STEP" "$status" "$LOG" >&2
  tail -n 30 "$LOG" | sed 's/^/  | /' >&2
  exit "$status"
}
trap failed ERR

# -- system packages ----------------------------------------------------------------------------
PY=${PYTHON:-python3}
begin "system packages"
need_apt=()
for pkg in pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo gcc g++ binutils clang-15 lld-15 llvm-15 \
           openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ ! -x .venv/bin/python ]; then
  # Debian's own python3 makes virtual environments and builds C extensions only with these.
  "$PY" -c "import ensurepip" 2>/dev/null || need_apt+=(python3-venv)
  "$PY" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_paths()['include'] + '/Python.h'))" \
    2>/dev/null || need_apt+=(python3-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  run $SUDO apt-get update -q
  run env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
  done_ "installed ${#need_apt[@]}"
else
  done_ "present"
fi

# -- pip installs, skipped when their stamp matches --------------------------------------------
declare -A INSTALLED=()

# installed_versions PYTHON NAME...: the versions of NAME... PYTHON's environment has, in INSTALLED.
installed_versions() {
  local py=$1; shift
  local name version
  for name in "$@"; do unset "INSTALLED[$name]"; done
  while read -r name version; do
    INSTALLED[$name]=$version
  done < <("$py" - "$@" <<'EOF'
import sys
from importlib import metadata
for name in sys.argv[1:]:
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        pass
EOF
)
}

# inputs_hash PYTHON_ID DIR: what an install of the distribution in DIR depends on.
inputs_hash() {
  local dir=$2 sources=()
  if [ "$dir" = . ]; then
    # C sources, and the modules setup.py compiles with Cython (named there as "core/....py"): an
    # editable install builds them once, and a compiled module shadows its changed source.
    sources=(core/*.c core/*.h core/*.pyx core/*.pxd)  # patterns matching nothing are skipped below
    mapfile -t -O ${#sources[@]} sources < <({ grep -o '"core/[^"]*\.\(py\|pyx\|c\|h\)"' setup.py || true; } |
                                              tr -d '"' | sort -u)
  else
    mapfile -t sources < <(find "$dir" -path "$dir/tests" -prune -o -path "*/build" -prune -o \
                               \( -name '*.c' -o -name '*.h' -o -name '*.pyx' -o -name '*.pxd' \) -print | sort)
  fi
  {
    echo "$1 PYOFFLOAD_COMPILE=${PYOFFLOAD_COMPILE:-}"
    for f in "$dir/pyproject.toml" "$dir/setup.py" "$dir/setup.cfg" "$dir/MANIFEST.in" "${sources[@]}"; do
      [ -f "$f" ] && sha256sum "$f"
    done
    true
  } | sha256sum | cut -c1-16
}

# pip_install VENV NAME DIR EXTRAS: `pip install -e DIR[EXTRAS]` into VENV unless its stamp matches.
pip_install() {
  local venv=$1 name=$2 dir=$3 want=${4:-} stamp="$1/.setup-stamps/$2"
  local hash old_hash="" old_version="" old_extras="" extras x missing=""
  begin "$name${want:+[$want]} ($venv)"
  hash=$(inputs_hash "$PYTHON_ID" "$dir")
  [ -f "$stamp" ] && read -r old_hash old_version old_extras <"$stamp"
  old_extras=${old_extras#-}
  for x in ${want//,/ }; do
    [[ ",$old_extras," == *",$x,"* ]] || missing+="$x "
  done
  if [ "$hash" = "$old_hash" ] && [ -z "$missing" ] && [ -n "${INSTALLED[$name]:-}" ] \
     && [ "${INSTALLED[$name]}" = "$old_version" ]; then
    done_ "up to date"
    return
  fi
  extras=$want
  if [ "$hash" = "$old_hash" ] && [ -n "$old_extras" ]; then  # keep what an earlier set-up added
    extras=$(printf '%s\n' ${want//,/ } ${old_extras//,/ } | sort -u | paste -sd, -)
  fi
  run "$venv/bin/python" -m pip install -e "$dir${extras:+[$extras]}"
  installed_versions "$venv/bin/python" "$name"
  mkdir -p "$venv/.setup-stamps"
  echo "$hash ${INSTALLED[$name]:-?} ${extras:--}" >"$stamp"
  done_ "installed ${INSTALLED[$name]:-?}"
}

# environment VENV INTERPRETER: create VENV with INTERPRETER unless it exists and runs.
environment() {
  local venv=$1 py=$2
  begin "$venv"
  if "$venv/bin/python" -c pass 2>/dev/null; then
    PYTHON_ID=$("$venv/bin/python" -c 'import sys; print(sys.version, sys.base_prefix)')
    done_ "present (Python ${PYTHON_ID%% *})"
    return
  fi
  run "$py" -m venv --clear "$venv"
  run "$venv/bin/python" -m pip install --upgrade pip
  PYTHON_ID=$("$venv/bin/python" -c 'import sys; print(sys.version, sys.base_prefix)')
  done_ "created (Python ${PYTHON_ID%% *})"
}

plugins=()
for plugin in plugins/*/; do
  [ -f "$plugin/pyproject.toml" ] && plugins+=("${plugin%/}")
done
plugin_name() { sed -n 's/^name = "\(.*\)"$/\1/p' "$1/pyproject.toml" | head -n 1; }

environment .venv "$PY"
names=(pyoffload torch)
for plugin in "${plugins[@]}"; do names+=("$(plugin_name "$plugin")"); done
installed_versions .venv/bin/python "${names[@]}"
if [ "$MODE" = test ]; then
  pip_install .venv pyoffload . test,docs
else
  pip_install .venv pyoffload .
fi

# Each plugin is its own distribution; a plugin may ship tools/setup.sh for what pip cannot do
# (pyoffload-cuda builds pycuda there, once: later runs find it installed).
for plugin in "${plugins[@]}"; do
  if [ -x "$plugin/tools/setup.sh" ]; then
    begin "$(basename "$plugin") tools/setup.sh"
    PATH="$PWD/.venv/bin:$PATH" run "$plugin/tools/setup.sh"
    done_ "done"
  fi
  pip_install .venv "$(plugin_name "$plugin")" "$plugin"
done

venvs=(.venv)
if [ "$MODE" = test ]; then
  # PyTorch's CPU build for the DLPack interop tests (a local wheel on these machines; the tests
  # skip where it cannot be installed).
  begin "torch 2.13.0 (.venv)"
  torch_version=${INSTALLED[torch]:-}
  if [ "${torch_version%%+*}" = 2.13.0 ]; then  # 2.13.0+cpu
    done_ "up to date"
  elif run .venv/bin/python -m pip install torch==2.13.0; then
    done_ "installed 2.13.0"
  else
    done_ "not installable here: interop tests skip"
  fi

  # Python 3.12 and 3.13 environments for the matrix rows that run the core and OpenCL tests on
  # every supported interpreter (the C extension builds for each).  Where an interpreter is
  # missing its rows are reported as not run (scripts/matrix.py), and set-up goes on.
  for v in 3.12 3.13; do
    py=""
    if "./.venv-$v/bin/python" -c pass 2>/dev/null; then
      py="./.venv-$v/bin/python"
    elif command -v pyenv >/dev/null && root=$(pyenv root 2>/dev/null); then
      py=$(ls -d "$root"/versions/"$v".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
    fi
    if [ -z "$py" ] && "python$v" -c pass 2>/dev/null; then
      py=$(command -v "python$v")
    fi
    if [ -z "$py" ]; then
      begin ".venv-$v"
      done_ "skipped: no Python $v (its rows will not run)"
      continue
    fi
    environment ".venv-$v" "$py"
    INSTALLED=()
    installed_versions ".venv-$v/bin/python" pyoffload pyoffload-opencl
    pip_install ".venv-$v" pyoffload . test
    pip_install ".venv-$v" pyoffload-opencl plugins/opencl
    venvs+=(".venv-$v")
  done
fi

if [ "$MODE" = test ]; then
  # An install without a C compiler (CC=false: every compiled module is optional) for the rows that
  # run the same source interpreted (matrix.py's *-pure rows).  Python 3.12 or later: there the
  # buffer protocol needs no C (PEP 688).  Not editable: an editable install would build in core/.
  pure_py=""
  for v in 3.12 3.13; do
    [ -x ".venv-$v/bin/python" ] && { pure_py=$(".venv-$v/bin/python" -c 'import sys; print(sys._base_executable)'); break; }
  done
  if [ -z "$pure_py" ]; then
    begin ".venv-pure"
    done_ "skipped: no Python 3.12 or 3.13 (its rows will not run)"
  else
    environment .venv-pure "$pure_py"
    begin "pyoffload, no compiler (.venv-pure)"
    hash=$( { echo "$PYTHON_ID"; git ls-files -z core plugins/opencl setup.py pyproject.toml \
              | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
    if [ "$(cat .venv-pure/.setup-stamps/pure 2>/dev/null)" = "$hash" ]; then
      done_ "up to date"
    else
      nocc=(env CC=false CXX=false LDSHARED=false)  # what a machine without a compiler has
      # From a copy of the sources: setuptools would take extensions that an earlier build left
      # in build/ as up to date, and link nothing, so the install would not be a compiler-less one.
      src=$(mktemp -d)
      git ls-files -coz --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$src"
      run "${nocc[@]}" .venv-pure/bin/python -m pip install --force-reinstall --no-deps "$src" "$src/plugins/opencl"
      run "${nocc[@]}" .venv-pure/bin/python -m pip install "$src[test]" "$src/plugins/opencl"
      rm -rf "$src"
      if .venv-pure/bin/python -c "import pyoffload.memory as m, sys; sys.exit(not m.__file__.endswith('.py'))"; then
        mkdir -p .venv-pure/.setup-stamps
        echo "$hash" >.venv-pure/.setup-stamps/pure
        done_ "installed (interpreted)"
      else
        echo "setup: the install without a compiler still has compiled modules" >>"$LOG"
        false
      fi
    fi
  fi
fi

# Byte-compile the project's sources for each interpreter, as a wheel install does: editable
# installs leave that to the first import, which never writes the .pyc files where
# PYTHONDONTWRITEBYTECODE is set, so every process would compile every module again.
begin "byte-compile"
for venv in "${venvs[@]}"; do
  run "$venv/bin/python" -m compileall -q core plugins/*/pyoffload_* docs/example_backend
done
done_ "${venvs[*]}"

STEP="set-up --$MODE"
STEP_START=$START
done_ "ready (details in $LOG)"
