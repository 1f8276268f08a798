#!/usr/bin/env bash
# The whole test suite: set up, lint and type checks (scripts/lint.sh), then the unit tests and the
# conformance matrix (one row per backend configuration), ending with a per-row table and a total
# line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
. .venv/bin/activate
bash scripts/lint.sh
python scripts/matrix.py "$@"
