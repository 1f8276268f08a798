"""DLPack device types of AMDGPU memory on the fake HIP runtime: kDLROCM, kDLROCMHost."""

from __future__ import annotations

import pytest

import pyoffload
from pyoffload import AllocKind


@pytest.fixture
def amd_devices(monkeypatch):
    try:
        pyoffload.shutdown()
    except pyoffload.OffloadError:
        pass
    monkeypatch.setenv("PYOFFLOAD_AMDGPU_DRIVER", "fake")
    monkeypatch.setenv("PYOFFLOAD_PLUGINS", "amdgpu")
    devs = [d for d in pyoffload.devices() if d.backend == "amdgpu"]
    assert devs, pyoffload.plugins()
    yield devs
    pyoffload.shutdown()


def test_dlpack_device_types(amd_devices):
    dev = amd_devices[-1]
    for kind, expected in (
        (AllocKind.DEVICE, (10, dev.index)),
        (AllocKind.HOST, (11, 0)),
        (AllocKind.MANAGED, (10, dev.index)),
    ):
        if kind.name not in dev.info["memory_kinds"]:
            continue
        a = dev.alloc(128, kind)
        assert a.__dlpack_device__() == expected, kind
        a.free()
    assert dev.info["dlpack_device_types"]["DEVICE"] == 10
