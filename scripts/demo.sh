#!/usr/bin/env bash
# The main job: list plugins and devices, then run the demo on every device present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
. .venv/bin/activate
pyoffload plugins
pyoffload info
pyoffload demo
