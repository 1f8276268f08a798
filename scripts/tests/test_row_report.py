"""The matrix's row_report plugin: a row that dies still names its failures and the test it died in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parent.parent / "pytest_plugins"

TESTS = """
import os

def test_passes():
    pass

def test_fails():
    assert 1 + 1 == 3, "arithmetic broke"

def test_crashes():
    os.abort()

def test_never_reached():
    pass
"""


def test_a_row_that_crashes_names_its_failure_and_the_test_it_died_in(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(TESTS)
    running = tmp_path / "running"
    env = dict(os.environ, PYTHONPATH=str(PLUGINS), PYOFFLOAD_MATRIX_RUNNING=str(running))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "row_report", "test_sample.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode < 0, proc.stdout + proc.stderr  # died of SIGABRT, no summary
    assert "FAILED test_sample.py::test_fails (call): AssertionError: arithmetic broke" in proc.stderr, proc.stderr
    assert "test_passes" not in proc.stderr
    assert running.read_text() == "test_sample.py::test_crashes"
