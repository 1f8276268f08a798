"""Without a usable OpenCL driver the plugin reports "no devices" and the runtime carries on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pyoffload.backend import NoDevicesError


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def test_no_icd_means_no_devices_and_host_still_works(tmp_path) -> None:
    # The ICD loader finds no vendor file in an empty directory.
    # (only this backend and the host's: other installed backends have devices of their own)
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path), PYOFFLOAD_PLUGINS="opencl")
    result = _run(
        """
        import pyoffload
        report = [r for r in pyoffload.plugins() if r.name == "opencl"][0]
        print(report.status, "|", report.reason)
        print([d.backend for d in pyoffload.devices()])
        """,
        env,
    )
    assert result.returncode == 0, result.stderr
    status_line, devices_line = result.stdout.strip().splitlines()
    assert status_line.startswith("no devices | no OpenCL platform")
    assert "PLATFORM_NOT_FOUND" in status_line  # the ICD loader's own reason
    assert devices_line == "['host']"


def test_module_imports_without_pyopencl() -> None:
    result = _run(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "pyopencl" or name.startswith("pyopencl."):
                    raise ImportError("pyopencl blocked for this test")
        sys.meta_path.insert(0, Block())
        import pyoffload_opencl.plugin as plugin
        from pyoffload.backend import NoDevicesError
        try:
            plugin.init_impl()
        except NoDevicesError as exc:
            print("NoDevicesError:", exc)
        """,
        dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert "NoDevicesError:" in result.stdout and "pyopencl blocked" in result.stdout


def test_init_reports_no_devices_as_the_hook_error(monkeypatch) -> None:
    import pyopencl as cl

    from pyoffload_opencl import plugin

    def no_platforms():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", no_platforms)
    with pytest.raises(NoDevicesError) as err:
        plugin.init_impl()
    assert "PLATFORM_NOT_FOUND_KHR" in str(err.value)
