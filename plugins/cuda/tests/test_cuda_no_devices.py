"""On a machine without the CUDA driver the plugin imports, reports why, and stays out of the way."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from pyoffload.backend import NoDevicesError

HERE = pathlib.Path(__file__).resolve().parent


def _has_libcuda() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYOFFLOAD_")}
    env.update(extra)
    return env


def test_plugin_module_imports_without_touching_the_driver():
    code = (
        "import sys; import pyoffload_cuda.plugin; "
        "assert 'pycuda' not in sys.modules and 'pycuda.driver' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_clean_env())
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_init_without_pycuda_says_why(monkeypatch):
    from pyoffload_cuda import plugin

    monkeypatch.delenv("PYOFFLOAD_CUDA_DRIVER", raising=False)
    monkeypatch.setitem(sys.modules, "pycuda", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    with pytest.raises(NoDevicesError, match="pycuda.driver cannot be imported"):
        plugin.init_impl()


def test_bad_driver_selection_is_reported(monkeypatch):
    from pyoffload_cuda import plugin

    monkeypatch.setenv("PYOFFLOAD_CUDA_DRIVER", "bogus")
    with pytest.raises(NoDevicesError, match="bogus"):
        plugin.init_impl()


def test_fake_without_devices_reports_the_driver_reason(monkeypatch):
    from pyoffload_cuda import plugin

    monkeypatch.setenv("PYOFFLOAD_CUDA_DRIVER", "fake")
    monkeypatch.setenv("PYOFFLOAD_CUDA_FAKE_DEVICES", "0")
    with pytest.raises(NoDevicesError, match="no CUDA-capable device"):
        plugin.init_impl()


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is None, reason="pycuda is not installed")
def test_real_pycuda_on_this_machine_reports_no_devices():
    """The real binding, the real loader: `pyoffload plugins` lists cuda with the reason, and the
    host backend still works."""
    if _has_libcuda():
        pytest.skip("this machine has a CUDA driver")
    code = (
        "import pyoffload\n"
        "rep = [r for r in pyoffload.plugins() if r.name == 'cuda'][0]\n"
        "print(rep.line())\n"
        "print([d.id for d in pyoffload.devices()])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_clean_env(PYOFFLOAD_PLUGINS="cuda"),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line, devices = proc.stdout.strip().splitlines()
    assert "no devices: pycuda.driver cannot be imported: libcuda.so.1" in line
    assert devices == "['host-0']"


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is None, reason="pycuda is not installed")
def test_real_pycuda_with_a_driver_that_finds_no_gpu(tmp_path):
    """With a libcuda that loads but finds no device (the stand-in), cuInit's own error is the
    reason."""
    if _has_libcuda():
        pytest.skip("this machine has a CUDA driver")
    cuda_root = os.environ.get("CUDA_ROOT", "/usr/local/cuda")
    if not pathlib.Path(cuda_root, "include", "cuda.h").exists():
        pytest.skip("no CUDA toolkit headers")
    tools = HERE.parent / "tools"
    subprocess.run(
        [sys.executable, str(tools / "gen_libcuda_stub.py"), cuda_root, str(tmp_path / "s.c")],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(tmp_path / "libcuda.so.1"),
            str(tmp_path / "s.c"),
        ],
        check=True,
    )
    code = "import pyoffload\nprint([r.line() for r in pyoffload.plugins() if r.name == 'cuda'][0])\n"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(PYOFFLOAD_PLUGINS="cuda", LD_LIBRARY_PATH=str(tmp_path)),
    )
    assert proc.returncode == 0, proc.stderr
    assert "no devices: cuInit failed" in proc.stdout
