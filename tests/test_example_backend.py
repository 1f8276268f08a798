"""The plugin guide's example backend, installed as its own distribution, passes the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "example_backend"


def test_example_backend_passes_conformance(tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(EXAMPLE)], check=True)
    env = dict(os.environ, PYTHONPATH=str(site), PYOFFLOAD_PLUGINS="loopback")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pyoffload.testing",
         "--pyargs", "pyoffload.conformance"],
        capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    table = proc.stdout[proc.stdout.index("pyoffload conformance by device"):]
    row = next(line for line in table.splitlines() if line.startswith("loopback-"))
    passed, skipped, failed = map(int, row.split()[1:4])
    assert passed >= 50 and failed == 0, row
