"""The real plugin with the real hip-python on a machine without ROCm or an AMD GPU: importing never
fails, and init reports ``NoDevicesError`` with the driver's own reason."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pyoffload.backend import NoDevicesError

from pyoffload_amdgpu import driver, plugin

hip_python = pytest.importorskip("hip")


def _rocm_present() -> bool:
    try:
        (err,) = hip_python.hip.hipInit(0)
    except RuntimeError:
        return False
    return int(err) == 0 and hip_python.hip.hipGetDeviceCount()[1] > 0


pytestmark = pytest.mark.skipif(_rocm_present(), reason="this machine has a working HIP runtime and GPU")


def test_init_reports_the_drivers_reason(monkeypatch):
    monkeypatch.delenv(driver.DRIVER_ENV, raising=False)
    with pytest.raises(NoDevicesError) as err:
        plugin.init_impl()
    message = str(err.value)
    # Without ROCm hip-python cannot dlopen the runtime; with ROCm but no GPU, hipInit or
    # hipGetDeviceCount says so.  Either way the reason is the driver's, not ours.
    assert "libamdhip64" in message or "hipErrorNoDevice" in message or "hipInit failed" in message
    assert plugin._state is None


def test_unknown_driver_choice_is_reported(monkeypatch):
    monkeypatch.setenv(driver.DRIVER_ENV, "cuda")
    with pytest.raises(NoDevicesError, match="'cuda' is not a driver"):
        plugin.init_impl()


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != driver.DRIVER_ENV} | env
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=120, check=False
    )


def test_import_never_loads_hip_and_survives_its_absence():
    code = (
        "import sys\n"
        "sys.modules['hip'] = None  # hip-python not installed\n"
        "import pyoffload_amdgpu.plugin as p\n"
        "assert 'rocm.bindings.hip' not in sys.modules\n"
        "try:\n"
        "    p.init_impl()\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("NoDevicesError") and "hip-python is not importable" in result.stdout


def test_pyoffload_lists_the_plugin_with_no_devices_and_keeps_working():
    code = (
        "import pyoffload\n"
        "devices = pyoffload.devices()\n"
        "print([d.backend for d in devices])\n"
        "x = pyoffload.host_device().alloc(16); pyoffload.free(x)\n"
    )
    result = _run(code, PYOFFLOAD_PLUGINS="amdgpu")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['host']"
    listing = subprocess.run(
        [sys.executable, "-m", "pyoffload.cli", "plugins"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != driver.DRIVER_ENV} | {"PYOFFLOAD_PLUGINS": "amdgpu"},
        timeout=120,
        check=False,
    )
    line = next(line for line in listing.stdout.splitlines() if line.startswith("amdgpu"))
    reason = line.split("no devices:", 1)[1]
    assert "libamdhip64" in reason or "hipErrorNoDevice" in reason or "hipInit failed" in reason
