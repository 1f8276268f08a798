"""The package ships ``py.typed``: its annotations must hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_core_type_checks(tmp_path):
    # The import package's source is core/; give mypy the layout it will have once installed.
    (tmp_path / "pyoffload").symlink_to(ROOT / "core")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "pyoffload",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--exclude",
            "pyoffload/conformance",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (ROOT / "core" / "py.typed").exists()
