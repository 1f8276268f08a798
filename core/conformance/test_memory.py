"""Allocation kinds, the registry (free / mem_info by pointer), memcpy and memfill."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, OffloadError

from ._util import alloc_or_skip, read

KINDS = list(AllocKind)


def _alloc_or_skip(device, size, kind):
    try:
        return device.alloc(size, kind)
    except pyoffload.UnsupportedError as exc:
        pytest.skip(f"{device.id} does not support {kind.name}: {exc}")


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_alloc_free_each_kind(device, kind):
    a = _alloc_or_skip(device, 4096, kind)
    assert a.size == 4096 and a.kind is kind and a.ptr != 0
    assert a.device is (None if kind is AllocKind.HOST else device)
    info = pyoffload.mem_info(a.ptr)
    assert (info.base, info.size, info.kind) == (a.ptr, 4096, kind)
    pyoffload.free(a.ptr)
    assert a.freed
    with pytest.raises(OffloadError) as err:
        pyoffload.mem_info(a.ptr)
    assert err.value.errc is Errc.NOT_FOUND


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_roundtrip_each_kind(device, kind):
    a = _alloc_or_skip(device, 1 << 16, kind)
    data = np.random.default_rng(1).integers(0, 255, 1 << 16, dtype=np.uint8)
    pyoffload.memcpy(a, data)
    assert np.array_equal(read(a, np.uint8, 1 << 16), data)
    a.free()


@pytest.mark.parametrize("kind", [AllocKind.HOST, AllocKind.MANAGED], ids=["HOST", "MANAGED"])
def test_host_visible_kinds_expose_memory(device, kind):
    a = _alloc_or_skip(device, 64, kind)
    view = a.view(np.int32)
    view[:] = np.arange(16)
    assert np.array_equal(read(a, np.int32, 16), np.arange(16))
    with pytest.raises(OffloadError, match="still exported"):
        a.free()
    del view
    a.free()


def test_interior_pointer_resolves(device):
    a = device.alloc(1000)
    info = pyoffload.mem_info(a.ptr + 999)
    assert info.base == a.ptr and info.offset == 999 and info.allocation is a
    with pytest.raises(OffloadError) as err:
        pyoffload.free(a.ptr + 8)
    assert err.value.errc is Errc.INVALID_ARGUMENT and hex(a.ptr + 8) in str(err.value)
    assert not a.freed
    a.free()


@pytest.mark.parametrize("size", [0, -1, 2**64, 2**64 + 64])
def test_bad_sizes(device, size):
    with pytest.raises(OffloadError) as err:
        device.alloc(size)
    assert err.value.errc is Errc.INVALID_SIZE
    assert str(size) in str(err.value)


@pytest.mark.parametrize("size", [1.5, "8", None, True])
def test_sizes_of_the_wrong_type(device, size):
    with pytest.raises(TypeError):
        device.alloc(size)


def test_numpy_integer_sizes(device):
    a = device.alloc(np.int64(96))
    assert a.size == 96 and isinstance(a.size, int)
    a.free()


def test_double_free_and_unknown_pointer(device):
    a = device.alloc(64)
    a.free()
    with pytest.raises(OffloadError) as err:
        a.free()
    assert err.value.errc is Errc.INVALID_ARGUMENT and "double free" in str(err.value)
    with pytest.raises(OffloadError) as err:
        pyoffload.free(0x10)
    assert err.value.errc is Errc.NOT_FOUND and "0x10" in str(err.value)


def test_memcpy_bounds_checked_before_backend(device):
    a = device.alloc(64)
    big = np.zeros(65, np.uint8)
    with pytest.raises(OffloadError) as err:
        pyoffload.memcpy(a, big, 65)
    assert err.value.errc is Errc.INVALID_SIZE and "65" in str(err.value)
    with pytest.raises(OffloadError) as err:
        pyoffload.memcpy(big, a.ptr + 32, 40)
    assert err.value.errc is Errc.INVALID_SIZE
    a.free()


def test_memcpy_device_to_device_same_device(device):
    data = np.arange(256, dtype=np.int32)
    a, b = device.alloc(data.nbytes), device.alloc(data.nbytes)
    pyoffload.memcpy(a, data)
    pyoffload.memcpy(b.ptr + 512, a.ptr, 512)
    pyoffload.memcpy(b, a, 512)
    assert np.array_equal(read(b, np.int32, 256), np.concatenate([data[:128], data[:128]]))
    a.free()
    b.free()


@pytest.mark.parametrize(
    "pattern",
    [b"\xab", np.uint16(0xBEEF), np.uint32(0xDEADBEEF), np.uint64(0x0123456789ABCDEF), b"abc"],
    ids=["1", "2", "4", "8", "3"],
)
def test_memfill_patterns(device, pattern):
    pat = bytes(pattern) if isinstance(pattern, bytes) else pattern.tobytes()
    size = len(pat) * 100
    a = device.alloc(size + 8)
    pyoffload.memfill(a, b"\x00", size + 8)
    pyoffload.memfill(a, pattern, size)
    got = read(a, np.uint8, size + 8).tobytes()
    assert got[:size] == pat * 100
    assert got[size:] == b"\x00" * 8
    a.free()


def test_memfill_rejects_ragged_size(device):
    a = device.alloc(64)
    with pytest.raises(OffloadError) as err:
        pyoffload.memfill(a, np.uint32(1), 6)
    assert err.value.errc is Errc.INVALID_SIZE
    a.free()


def test_memcpy_queue_ordered(device, queue):
    data = np.arange(1024, dtype=np.float32)
    a = device.alloc(data.nbytes)
    out = np.zeros_like(data)
    queue.memcpy(a, data)
    ev = queue.memcpy(out, a)
    ev.wait()
    assert np.array_equal(out, data)
    a.free()


@pytest.mark.parametrize("kind", list(pyoffload.AllocKind), ids=lambda k: k.name)
def test_a_host_view_of_a_range_inside_an_allocation(device, kind):
    # Pointer + size -> a zero-copy array of host-accessible memory, counted as an export.
    a = alloc_or_skip(device, 256, kind)
    pyoffload.memcpy(a, np.arange(64, dtype=np.int32))
    if not a.host_accessible:
        with pytest.raises(pyoffload.OffloadError) as err:
            pyoffload.host_view(a.ptr + 16, 32)
        assert err.value.errc is pyoffload.Errc.UNSUPPORTED and "host_view" in str(err.value)
        assert a.exports == 0
        a.free()
        return
    view = pyoffload.host_view(a.ptr + 16, 32, np.int32)
    assert view.tolist() == list(range(4, 12))
    assert bytes(memoryview(view)) == np.arange(4, 12, dtype=np.int32).tobytes()
    view[0] = -1  # the allocation's own bytes
    assert read(a, np.int32, 5)[4] == -1
    assert a.exports == 1
    with pytest.raises(pyoffload.OffloadError) as err:
        a.free()  # exported
    assert err.value.errc is pyoffload.Errc.INVALID_ARGUMENT
    whole = pyoffload.host_view(a, 256)  # an Allocation for its start; bytes by default
    assert whole.dtype == np.uint8 and whole.size == 256
    for bad in ((a.ptr + 250, 8), (a.ptr, 257), (a.ptr, 6, np.int32)):
        with pytest.raises(pyoffload.OffloadError) as err:
            pyoffload.host_view(*bad)
        assert err.value.errc is pyoffload.Errc.INVALID_SIZE, bad
    del view, whole
    gc.collect()
    assert a.exports == 0
    a.free()


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_memory_the_device_calls_host_addressable_is_read_and_written_at_its_address(device, kind):
    # Device.host_addressable is a claim a transport acts on (it reads and writes such memory in
    # place instead of staging): what the device's queue wrote is at the address once the work
    # has completed, and what the host writes there the device's copies see.
    a = _alloc_or_skip(device, 4096, kind)
    if not device.host_addressable(kind):
        # HOST and MANAGED memory is the host's on every device; DEVICE memory of a host device too.
        assert kind is AllocKind.DEVICE and not device.host_memory, (device.id, kind)
        a.free()
        return
    pyoffload.memfill(a, np.uint32(0xA5A5A5A5), 4096)  # the device's own fill, completed
    assert ctypes.string_at(a.ptr, 4096) == b"\xa5" * 4096
    ctypes.memmove(a.ptr + 100, bytes(range(200)), 200)
    out = np.zeros(4096, np.uint8)
    pyoffload.memcpy(out, a, 4096)
    assert out[100:300].tobytes() == bytes(range(200)) and out[99] == out[300] == 0xA5
    a.free()
