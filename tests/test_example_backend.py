"""The plugin guide's example backend, installed as its own distribution: it passes the whole
conformance suite, stays short enough to read, and a copy of it written for another hook-API
major version is reported and not loaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "example_backend"
PACKAGE = EXAMPLE / "pyoffload_example"
LINE_BUDGET = 400  # non-blank lines of the backend package: the guide's running example
# Every test of the example's device row on this revision passes but two skips: one test needs a
# second non-host platform.
PASSED = 190


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a directory of its own, built from a copy of its source
    so that the build leaves no outputs in docs/."""
    tmp = tmp_path_factory.mktemp("example")
    source = tmp / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
    )
    return target


def _run(args: list[str], site: Path, plugins: str = "example") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(site), PYOFFLOAD_PLUGINS=plugins)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=600
    )


def test_example_backend_passes_conformance(site: Path) -> None:
    proc = _run(
        [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pyoffload.testing",
            "--pyargs",
            "pyoffload.conformance",
        ],
        site,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    table = proc.stdout[proc.stdout.index("pyoffload conformance by device") :]
    row = next(line for line in table.splitlines() if line.startswith("example-python-cpu-"))
    passed, skipped, failed = map(int, row.split()[1:4])
    assert failed == 0 and passed >= PASSED, row


def test_example_backend_is_listed_with_its_hook_api(site: Path) -> None:
    proc = _run(["-m", "pyoffload", "plugins", "-v"], site)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("example "))
    assert "pyoffload-example" in line and "ok (1 device)" in line and "hook API 1.0" in line, proc.stdout


def test_another_major_hook_api_is_refused_with_the_reason(site: Path, tmp_path: Path) -> None:
    other = tmp_path / "site"
    shutil.copytree(site, other)
    plugin = other / "pyoffload_example" / "plugin.py"
    text = plugin.read_text()
    assert "HOOK_API = (1, 0)" in text
    plugin.write_text(text.replace("HOOK_API = (1, 0)", "HOOK_API = (2, 0)"))
    proc = _run(["-m", "pyoffload", "plugins"], other)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("example "))
    assert "incompatible" in line and "hook API 2.0" in line and "another major version" in line, proc.stdout
    proc = _run(["-c", "import pyoffload; print(sorted({d.backend for d in pyoffload.devices()}))"], other)
    assert proc.stdout.strip() == "['host']", proc.stdout + proc.stderr


def test_example_backend_fits_its_line_budget() -> None:
    lines = sum(1 for path in PACKAGE.glob("*.py") for line in path.read_text().splitlines() if line.strip())
    assert 0 < lines <= LINE_BUDGET, f"the example backend has {lines} non-blank lines (budget {LINE_BUDGET})"
