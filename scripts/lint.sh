#!/usr/bin/env bash
# Lint and type checks, before the tests (scripts/test.sh) and as pre-commit hooks
# (.pre-commit-config.yaml): ruff's lint and format check over the project's Python, mypy --strict
# over the core and over every plugin that ships py.typed.  Run from an environment with the test
# extras (ruff, mypy): `. .venv/bin/activate && bash scripts/lint.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
step() {  # $1: what, rest: the command
  local what=$1 start out
  shift
  start=$(date +%s%N)
  if out=$("$@" 2>&1); then
    printf 'lint: %-34s ok      %6d ms\n' "$what" $(( ($(date +%s%N) - start) / 1000000 ))
  else
    printf 'lint: %-34s FAILED\n%s\n' "$what" "$out" >&2
    status=1
  fi
}

step "ruff check" python -m ruff check .
step "ruff format --check" python -m ruff format --check .

# mypy sees the import package under its installed name: a scratch directory with pyoffload -> core.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ln -s "$PWD/core" "$scratch/pyoffload"
step "mypy --strict pyoffload" \
  bash -c "cd '$scratch' && python -m mypy --strict --config-file '$PWD/pyproject.toml' --cache-dir '$scratch/.mypy_cache' \
           --exclude 'pyoffload/conformance' pyoffload"
for typed in plugins/*/*/py.typed; do
  [ -e "$typed" ] || continue
  pkg=$(basename "$(dirname "$typed")")
  plugin=$(dirname "$(dirname "$typed")")
  step "mypy --strict $pkg" \
    bash -c "cd '$plugin' && MYPYPATH='$scratch' python -m mypy --strict --config-file '$PWD/pyproject.toml' --cache-dir '$scratch/.mypy_cache-$pkg' $pkg"
done
exit "$status"
