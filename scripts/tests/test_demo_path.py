"""The README's demo command on a machine with Python 3.11 only, as stock Debian 12 has it.

pyenv and its interpreters are hidden (its directories off PATH, PYENV_ROOT pointing nowhere), so
are this checkout's virtual environment and any python3.12/python3.13: ``scripts/demo.sh`` must set
up what the demo needs and run the demo without looking for them.  Set-up is one line per step, the
detail in its log.  Run by the matrix's ``demo-no-pyenv`` row (not by the unit row: it runs the
set-up of this checkout, which a unit test should not do).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _without_extra_interpreters(tmp_path: Path) -> dict[str, str]:
    hidden = ("pyenv", str(ROOT))
    path = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not any(h in d for h in hidden) and not any(Path(d, f"python3.{v}").exists() for v in (12, 13))
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYOFFLOAD_", "POCL_")) and k != "PYTHONPATH"
    }
    env.update(PATH=os.pathsep.join(path), PYENV_ROOT=str(tmp_path / "no-pyenv"), SETUP_LOG=str(tmp_path / "setup.log"))
    return env


def test_demo_runs_with_python_3_11_only(tmp_path: Path) -> None:
    env = _without_extra_interpreters(tmp_path)
    for name in ("pyenv", "python3.12", "python3.13"):
        assert shutil.which(name, path=env["PATH"]) is None, f"{name} is still on PATH"
    proc = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    assert "host-0: axpy_f32 y = 1 + 2*x  -> [1.0, 3.0, 5.0" in out, out
    assert "host-0: after unload the destructor wrote" in out, out
    setup = out[: out.index("\nhost ")].splitlines() if "\nhost " in out else out.splitlines()
    setup_lines = [line for line in setup if line.startswith("setup: ")]
    assert setup_lines and "ready" in setup_lines[-1], out
    assert "3.12" not in out + proc.stderr and "3.13" not in out + proc.stderr, "the demo looked for them"
    assert (tmp_path / "setup.log").exists()
