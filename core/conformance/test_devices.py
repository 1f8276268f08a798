"""Device enumeration and information."""

from __future__ import annotations

import pyoffload
from pyoffload import DeviceType


def test_device_identity(device):
    assert isinstance(device.name, str) and device.name
    assert isinstance(device.vendor, str)
    assert device.type in set(DeviceType)
    assert device.backend in {r.name for r in pyoffload.plugins() if r.status == "ok"}
    assert device in device.platform.devices
    assert device in pyoffload.devices()


def test_device_info_has_common_keys(device):
    info = device.info
    for key in ("name", "vendor", "type", "platform", "backend"):
        assert key in info, key
    assert info["name"] == device.name
    assert info["backend"] == device.backend
    assert info.get("memory_bytes", 1) > 0


def test_host_device_is_last():
    devs = pyoffload.devices()
    assert devs[-1] is pyoffload.host_device()
    assert devs[-1].type is DeviceType.HOST


def test_platform_lists_its_devices(device):
    plats = pyoffload.platforms()
    assert device.platform in plats
    assert all(d.platform is device.platform for d in device.platform.devices)
