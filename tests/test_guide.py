"""The user guide (docs/guide, mkdocs.yml): every ```python example runs, the site builds.

Each page's examples run in order in one namespace, in a fresh interpreter on the host backend
only, so that a page cannot depend on another or on the machine's accelerators.  A failing
example's traceback names the page and the line in it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyoffload import settings

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(GUIDE.glob("*.md"))
_FENCE = re.compile(r"^```python\n(.*?)^```\s*$", re.M | re.S)

# Runs one page: each block compiled with the page as its file name and its own line numbers.
_RUNNER = r"""
import re, sys, warnings
import pyoffload
warnings.simplefilter("error", pyoffload.TeardownWarning)
warnings.simplefilter("error", pyoffload.LeakWarning)
path = sys.argv[1]
text = open(path).read()
namespace = {"__name__": "__guide__"}
for m in re.finditer(r"^```python\n(.*?)^```\s*$", text, re.M | re.S):
    line = text.count("\n", 0, m.start(1))
    exec(compile("\n" * line + m.group(1), path, "exec"), namespace)
"""


def python_blocks(page: Path) -> list[str]:
    return _FENCE.findall(page.read_text())


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYOFFLOAD_PLUGINS="",
        PYOFFLOAD_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "examples"), env.get("PYTHONPATH")])),
    )
    env.pop("PYOFFLOAD_DEVICES", None)
    return env


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in PAGES if f"guide/{p.name}" not in nav]
    assert not missing, f"guide pages missing from mkdocs.yml's nav: {missing}"


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.stem)
def test_examples_run(page: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(page)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{page.name}:\n{proc.stdout}\n{proc.stderr}"
    assert "Warning" not in proc.stderr, proc.stderr


def _table(page: Path) -> dict[str, str]:
    rows = re.findall(r"^\| `(PYOFFLOAD_\w+)` \| (.*) \|$", page.read_text(), re.M)
    return dict(rows)


def test_environment_table_matches_the_settings() -> None:
    documented = _table(GUIDE / "environment.md")
    declared = {v.name: v.meaning for v in settings.VARIABLES}
    assert list(documented) == list(declared), "the table lists the variables of pyoffload.settings.VARIABLES, in order"
    for name, meaning in declared.items():
        assert documented[name] == meaning, f"{name}: the table says {documented[name]!r}, VARIABLES {meaning!r}"


def test_site_builds_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    # ``python -m mkdocs``: the ``mkdocs`` script would put its own directory first on sys.path,
    # where the ``pyoffload`` console script shadows the package for the API reference.
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = (site / "guide" / "api" / "index.html").read_text()
    # The reference is generated from the docstrings: Queue.alloc_async's must be there.
    assert "Allocate in this queue" in api
    assert (site / "errors" / "index.html").is_file()
