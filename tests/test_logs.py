"""Logs carry no terminal colour codes where they do not go to a terminal: pyoffload's own log
lines (structlog's key=value renderer, never its colouring console renderer) and the test matrix's
rows (ranks under mpirun write to a pseudo-terminal, so pytest there would colour)."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_trace_log_lines_have_no_colour_codes(tmp_path: Path) -> None:
    code = (
        "import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
        "import numpy as np, pyoffload\n"
        "a = pyoffload.host_device().alloc(64); pyoffload.memcpy(a, np.zeros(64, np.uint8)); a.free()\n"
    )
    env = dict(os.environ, PYOFFLOAD_TRACE="1", PYOFFLOAD_PLUGINS="", FORCE_COLOR="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "event=" in proc.stderr, "the trace logged nothing"
    assert "\x1b[" not in proc.stderr, proc.stderr[:2000]


def test_matrix_rows_run_without_colour_off_a_terminal(monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("matrix", ROOT / "scripts" / "matrix.py")
    assert spec and spec.loader
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal, even under pytest -s
    env, args = matrix.colour_options()
    assert env["NO_COLOR"] == "1" and env["PY_COLORS"] == "0" and args == ["--color=no"]
