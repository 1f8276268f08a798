"""Installing any of the project's distributions prints no warnings from the build backend."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTIONS = [ROOT] + sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
# A Python warning as setuptools prints it ("...: SetuptoolsDeprecationWarning: ..."), or its
# banner for data directories that are not declared as packages.
WARNING = re.compile(r"\b\w*Warning: |Package would be ignored")


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=[p.name if p != ROOT else "pyoffload" for p in DISTRIBUTIONS])
def test_install_prints_no_warnings(dist: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--no-compile",
         "--target", str(tmp_path / "site"), str(dist)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warnings = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if WARNING.search(line)]
    assert not warnings, "\n".join(warnings)
    installed = {p.name for p in (tmp_path / "site").iterdir()}
    assert any(name.startswith("pyoffload") and not name.endswith("-info") for name in installed), installed
