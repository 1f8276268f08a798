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
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-v",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(tmp_path / "site"),
            str(dist),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warnings = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if WARNING.search(line)]
    assert not warnings, "\n".join(warnings)
    installed = {p.name for p in (tmp_path / "site").iterdir()}
    assert any(name.startswith("pyoffload") and not name.endswith("-info") for name in installed), installed


def _version(dist: Path) -> str:
    match = re.search(r'^version = "([^"]+)"$', (dist / "pyproject.toml").read_text(), re.M)
    assert match, dist
    return match.group(1)


def test_one_version_for_every_distribution() -> None:
    versions = {dist.name: _version(dist) for dist in DISTRIBUTIONS}
    assert len(set(versions.values())) == 1, versions


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=[p.name if p != ROOT else "pyoffload" for p in DISTRIBUTIONS])
def test_sdist_carries_the_licence_and_no_tests(dist: Path, tmp_path: Path) -> None:
    """Each distribution's sdist has the full licence text its metadata declares (Apache-2.0 with
    the LLVM exception, the same file as the repository's) and no tests: those need the rest of
    the checkout (conftest.py, helpers, the other distributions) and run from it."""
    import tarfile

    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(tmp_path)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=dist, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with tarfile.open(tmp_path / proc.stdout.split()[-1]) as sdist:
        names = {name.partition("/")[2]: name for name in sdist.getnames()}
        licence = sdist.extractfile(names["LICENSE"])
        pkg_info = sdist.extractfile(names["PKG-INFO"])
        assert licence is not None and pkg_info is not None
        assert licence.read() == (ROOT / "LICENSE").read_bytes()
        meta = pkg_info.read().decode()
    assert "License-Expression: Apache-2.0 WITH LLVM-exception" in meta, meta
    assert "---- LLVM Exceptions to the Apache 2.0 License ----" in (ROOT / "LICENSE").read_text()
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n], sorted(names)
