"""Device and platform information, after liboffload's olGetDeviceInfo / olGetPlatformInfo tests
and Unified Runtime's urDeviceGetInfo tests: every standard key is present with a value of its
documented type (or ``None`` where the backend does not know it), and the values agree."""

from __future__ import annotations

import pytest

import pyoffload
from pyoffload import AllocKind, DeviceType
from pyoffload.backend import INFO_KEYS


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _triple(value):
    return len(tuple(value)) == 3 and all(_positive_int(v) for v in value)


CHECKS = {
    "name": lambda v: isinstance(v, str) and v != "",
    "vendor": lambda v: isinstance(v, str),
    "driver_version": lambda v: isinstance(v, str),
    "type": lambda v: v in {t.value for t in DeviceType},
    "backend": lambda v: isinstance(v, str) and v != "",
    "platform": lambda v: isinstance(v, str) and v != "",
    "compute_units": _positive_int,
    "max_work_group_size": _positive_int,
    "max_work_item_sizes": _triple,
    "max_grid_size": _triple,
    "global_memory_bytes": _positive_int,
    "local_memory_bytes": _positive_int,
    "max_alloc_bytes": _positive_int,
    "clock_mhz": _positive_int,
    "sub_group_size": _positive_int,
    "address_bits": lambda v: v in (32, 64),
    "memory_kinds": lambda v: len(v) > 0 and {str(k).upper() for k in v} <= {k.name for k in AllocKind},
    "host_addressable_kinds": lambda v: {str(k).upper() for k in v} <= {k.name for k in AllocKind},
    "dlpack_device_types": lambda v: (
        set(v) <= {k.name for k in AllocKind}
        and all(int(t) in (1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17) for t in v.values())
    ),
}
NEVER_NONE = {"name", "vendor", "type", "backend", "platform"}
# What every backend knows about its devices (docs/guide/devices.md lists, per key, the backends
# that may answer None for the others): the limits the generic layer enforces, the sizes an array
# library blocks its work by, and the memory kinds.
ALWAYS_KNOWN = {
    "compute_units",
    "max_work_group_size",
    "max_work_item_sizes",
    "max_grid_size",
    "global_memory_bytes",
    "local_memory_bytes",
    "max_alloc_bytes",
    "address_bits",
    "memory_kinds",
}


def test_every_standard_key_has_a_check():
    assert set(CHECKS) == set(INFO_KEYS)


@pytest.mark.parametrize("key", list(INFO_KEYS))
def test_info_key_has_a_value_of_its_type(device, key):
    info = device.info
    assert key in info
    value = info[key]
    if value is None:
        assert key not in NEVER_NONE, f"{key} is always known"
        return
    assert CHECKS[key](value), f"{device.id}: info[{key!r}] = {value!r}"


@pytest.mark.parametrize("key", sorted(ALWAYS_KNOWN))
def test_info_key_every_backend_knows_is_known(device, key):
    assert device.info[key] is not None, f"{device.id}: info[{key!r}] is None"


def test_info_values_agree_with_the_device(device):
    info = device.info
    assert (info["name"], info["vendor"], info["type"]) == (device.name, device.vendor, device.type.value)
    assert info["backend"] == device.backend == device.platform.backend
    assert info["platform"] == device.platform.name
    wg, items = info["max_work_group_size"], info["max_work_item_sizes"]
    if wg is not None and items is not None:
        assert all(size <= wg for size in items), "a block dimension exceeds the work-group limit"
    total, largest = info["global_memory_bytes"], info["max_alloc_bytes"]
    if total is not None and largest is not None and not device.host_memory:
        assert largest <= total, "the largest allocation exceeds the device's memory"


def test_info_is_a_copy(device):
    info = device.info
    info["name"] = "changed"
    info.clear()
    assert device.info["name"] == device.name


def test_backend_extras_are_prefixed(device):
    extras = set(device.info) - set(INFO_KEYS)
    assert all(key.startswith(f"{device.backend}.") for key in extras), sorted(extras)


def test_platform_information(device):
    plat = device.platform
    assert isinstance(plat.name, str) and plat.name
    assert isinstance(plat.vendor, str) and isinstance(plat.version, str)
    assert plat in pyoffload.platforms() and plat.backend == device.backend
    indices = [d.index for d in plat.devices]
    assert len(set(indices)) == len(indices) and device.index in indices
    assert len({d.id for d in pyoffload.devices()}) == len(pyoffload.devices()), "device ids repeat"


def test_host_device_is_always_present():
    host = pyoffload.host_device()
    assert host in pyoffload.devices() and host.type is DeviceType.HOST and host.host_memory
    assert host.id == "host-0"
