"""README.md's python blocks run as they are written, in a fresh interpreter: once with every
backend that is installed (what a reader who copies them gets) and once with the host backend only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```\s*$", README.read_text(), re.MULTILINE | re.DOTALL)


def test_the_readme_has_python_to_run() -> None:
    assert BLOCKS, "README.md has no ```python block"


@pytest.mark.parametrize("plugins", [None, ""], ids=["installed-backends", "host-only"])
def test_readme_python_blocks_run_verbatim(plugins: str | None, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYOFFLOAD_PLUGINS", "PYOFFLOAD_DEVICES")}
    env["PYOFFLOAD_CACHE_DIR"] = str(tmp_path / "cache")
    if plugins is not None:
        env["PYOFFLOAD_PLUGINS"] = plugins
    for i, block in enumerate(BLOCKS):
        script = tmp_path / f"readme_block_{i}.py"
        script.write_text(block)
        proc = subprocess.run(
            [sys.executable, "-W", "error::pyoffload.TeardownWarning", str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, f"README block {i}:\n{block}\n{proc.stdout}\n{proc.stderr}"
        assert "Warning" not in proc.stderr, proc.stderr
