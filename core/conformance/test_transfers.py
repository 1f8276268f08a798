"""Copies and fills in depth (after liboffload's olMemcpy/olMemFill tests and UR's USM enqueue
tests): every direction, sizes, offsets, overlaps, queued and synchronous; results checked through
a path independent of the operation under test where the device offers one (a kernel writing,
host-visible memory read in place)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, OffloadError

from ._util import launch_n, read

SIZES = [1, 3, 64, 4096, 65537, 1 << 20]
PATTERNS = [b"\xab", b"\x01\x02", b"\x01\x02\x03\x04", bytes(range(8)), b"xyz", bytes(range(16))]


def _alloc(device, size, kind=AllocKind.DEVICE):
    try:
        return device.alloc(size, kind)
    except pyoffload.UnsupportedError as exc:
        pytest.skip(f"{device.id} has no {kind.name} memory: {exc}")


def _host_visible(alloc) -> np.ndarray:
    """Read host-accessible memory in place: independent of memcpy."""
    return np.frombuffer(alloc, dtype=np.uint8).copy()


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_of_every_size(device, size):
    a = _alloc(device, size)
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    pyoffload.memcpy(a, data)
    assert np.array_equal(read(a, np.uint8, size), data)
    a.free()


def test_device_to_host_copy_checked_by_a_kernel_write(device, kernels, queue):
    """The kernel writes known values; the copy out is the only thing under test."""
    n = 1000
    out = _alloc(device, 4 * n)
    launch_n(queue, kernels.kernel("iota_i32"), n, [out, np.int32(n), np.int32(-3)])
    assert np.array_equal(read(out, np.int32, n), np.arange(-3, n - 3, dtype=np.int32))
    out.free()


def test_host_to_device_copy_checked_through_host_visible_memory(device, kernels, queue):
    """y (host-visible) += 1.0 * x, where x arrived by the copy under test: y is read in place."""
    n = 512
    x = np.random.default_rng(3).random(n, dtype=np.float32)
    dx = _alloc(device, 4 * n)
    y = _alloc(device, 4 * n, AllocKind.MANAGED)
    np.frombuffer(y, np.float32)[:] = 0
    pyoffload.memcpy(dx, x)
    launch_n(queue, kernels.kernel("axpy_f32"), n, [y, dx, np.float32(1.0), np.int32(n)])
    assert np.allclose(np.frombuffer(y, np.float32), x)
    dx.free()
    y.free()


@pytest.mark.parametrize("kind", [AllocKind.HOST, AllocKind.MANAGED], ids=["HOST", "MANAGED"])
def test_host_visible_memory_sees_copies_in_place(device, kind):
    a = _alloc(device, 4096, kind)
    data = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    pyoffload.memcpy(a, data)
    assert np.array_equal(_host_visible(a), data)
    np.frombuffer(a, np.uint8)[:] = 7
    out = np.zeros(4096, np.uint8)
    pyoffload.memcpy(out, a)
    assert (out == 7).all()
    a.free()


@pytest.mark.parametrize("pattern", PATTERNS, ids=[f"{len(p)}B" for p in PATTERNS])
def test_fill_patterns(device, pattern):
    size = len(pattern) * 257
    a = _alloc(device, size + 64)
    pyoffload.memfill(a, b"\x00")
    pyoffload.memfill(a, pattern, size)
    got = read(a, np.uint8, size + 64)
    assert got[:size].tobytes() == pattern * 257
    assert (got[size:] == 0).all(), "the fill wrote past its end"
    a.free()


@pytest.mark.parametrize("offset", [0, 1, 4, 7, 64])
def test_fill_at_an_offset(device, offset):
    a = _alloc(device, 256)
    pyoffload.memfill(a, b"\x00")
    pyoffload.memfill(a.ptr + offset, np.uint8(0x5A), 100)
    got = read(a, np.uint8, 256)
    assert (got[offset : offset + 100] == 0x5A).all()
    assert (got[:offset] == 0).all() and (got[offset + 100 :] == 0).all()
    a.free()


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.float32, np.float64, np.uint64])
def test_fill_with_numpy_scalars(device, dtype):
    value = dtype(3)
    a = _alloc(device, 8 * 64)
    pyoffload.memfill(a, value)
    assert (read(a, dtype, 8 * 64 // np.dtype(dtype).itemsize) == value).all()
    a.free()


def test_fill_defaults_to_whole_patterns(device):
    a = _alloc(device, 10)
    pyoffload.memfill(a, b"\x00")
    pyoffload.memfill(a, b"abc")  # 9 bytes: three whole patterns
    assert read(a, np.uint8, 10).tobytes() == b"abcabcabc\x00"
    a.free()


@pytest.mark.parametrize("size", [1, 100, 65536])
def test_device_to_device_copy(device, size):
    a, b = _alloc(device, size), _alloc(device, size)
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    pyoffload.memcpy(a, data)
    pyoffload.memcpy(b, a)
    assert np.array_equal(read(b, np.uint8, size), data)
    a.free()
    b.free()


@pytest.mark.parametrize("shift", [1, 17, 100, -1, -17, -100])
def test_overlapping_copy_within_one_allocation_behaves_as_memmove(device, shift):
    n = 1000
    a = _alloc(device, n)
    data = np.arange(n, dtype=np.uint32).astype(np.uint8)
    pyoffload.memcpy(a, data)
    length = 500
    src, dst = (100, 100 + shift)
    pyoffload.memcpy(a.ptr + dst, a.ptr + src, length)
    expect = data.copy()
    expect[dst : dst + length] = data[src : src + length]
    assert np.array_equal(read(a, np.uint8, n), expect)
    a.free()


def test_overlapping_queued_copy(device, queue):
    n = 4096
    a = _alloc(device, n)
    data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    pyoffload.memcpy(a, data)
    queue.memcpy(a.ptr + 8, a, n - 8).wait()
    expect = data.copy()
    expect[8:] = data[:-8]
    assert np.array_equal(read(a, np.uint8, n), expect)
    a.free()


@pytest.mark.parametrize("size", [16, 4096, 1 << 20])
def test_queued_round_trip(device, queue, size):
    a = _alloc(device, size)
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    out = np.zeros(size, np.uint8)
    queue.memcpy(a, data)
    queue.memcpy(out, a).wait()
    assert np.array_equal(out, data)
    a.free()


def test_queued_operations_stay_in_order(device, kernels, queue):
    a = _alloc(device, 4 * 256)
    out = np.zeros(256, np.int32)
    for base in range(5):
        queue.memfill(a, np.int32(-1))
        queue.launch(kernels.kernel("iota_i32"), 8, 32, [a, np.int32(256), np.int32(base)])
    queue.memcpy(out, a)
    queue.wait()
    assert np.array_equal(out, np.arange(4, 260, dtype=np.int32))
    a.free()


def test_queued_copy_keeps_its_source_alive(device, queue):
    gate = threading.Event()
    a = _alloc(device, 1 << 16)
    queue.launch_host_function(gate.wait)
    ev = queue.memcpy(a, np.full(1 << 16, 3, np.uint8))  # the only reference to the source
    gate.set()
    ev.wait()
    assert (read(a, np.uint8, 1 << 16) == 3).all()
    a.free()


def test_queued_fill_of_a_sub_range(device, queue):
    a = _alloc(device, 1024)
    queue.memfill(a, b"\x00").wait()
    queue.memfill(a.ptr + 100, np.uint16(0xBEEF), 200).wait()
    got = read(a, np.uint8, 1024)
    assert got[100:300].view(np.uint16).tolist() == [0xBEEF] * 100
    assert (got[:100] == 0).all() and (got[300:] == 0).all()
    a.free()


def test_copy_without_a_size_needs_sides_of_one_size(device):
    a, b = _alloc(device, 64), _alloc(device, 4000)
    pyoffload.memcpy(a, np.arange(64, dtype=np.uint8))
    pyoffload.memfill(b, b"\xee")
    for dst, src in [(a, b), (b, a), (a, np.zeros(200, np.uint8)), (np.zeros(16, np.uint8), a), (a.ptr + 8, a)]:
        with pytest.raises(OffloadError) as err:
            pyoffload.memcpy(dst, src)
        assert err.value.errc is Errc.INVALID_SIZE and "size" in str(err.value)
    assert read(a, np.uint8, 64).tolist() == list(range(64))  # nothing was copied
    with pytest.raises(OffloadError) as err:
        queue = device.create_queue()
        try:
            queue.memcpy(a, b)
        finally:
            queue.destroy()
    assert err.value.errc is Errc.INVALID_SIZE
    pyoffload.memcpy(b, a, 64)  # with a size, sides may differ
    assert read(b, np.uint8, 65).tolist() == list(range(64)) + [0xEE]
    same = np.arange(64, dtype=np.uint8)[::-1].copy()
    pyoffload.memcpy(a, same)  # sides of one size need none
    assert read(a, np.uint8, 64).tolist() == same.tolist()
    a.free()
    b.free()


@pytest.mark.parametrize(
    "call",
    [
        lambda a: pyoffload.memfill(0, b"\0", 8),
        lambda a: pyoffload.memcpy(0, a, 8),
        lambda a: pyoffload.memcpy(a, 0, 8),
        lambda a: pyoffload.memcpy(np.zeros(8, np.uint8), np.uint64(0), 8),
        lambda a: pyoffload.prefetch(0, 8),
        lambda a: pyoffload.advise(0, 8, pyoffload.MemAdvice.SET_READ_MOSTLY),
    ],
    ids=["memfill", "memcpy-dst", "memcpy-src", "memcpy-numpy-src", "prefetch", "advise"],
)
def test_null_addresses_are_invalid_null_pointers(device, call):
    # As olMemcpy/olMemFill and urEnqueueUSMMemcpy/Fill/Prefetch/Advise answer a null pointer.
    a = _alloc(device, 64)
    with pytest.raises(OffloadError) as err:
        call(a)
    assert err.value.errc is Errc.INVALID_NULL_POINTER and "NULL" in str(err.value)
    a.free()


def test_numpy_integers_are_addresses(device):
    a = _alloc(device, 64)
    pyoffload.memcpy(a, np.arange(64, dtype=np.uint8))
    signed = (np.int64,) if a.ptr + 64 < 2**63 else ()  # an address with the top bit set fits no int64
    for as_np in (np.uint64, np.uintp, *signed):
        info = pyoffload.mem_info(as_np(a.ptr + 8))
        assert (info.base, info.size) == (a.ptr, 64)
        out = np.zeros(8, np.uint8)
        pyoffload.memcpy(out, as_np(a.ptr + 8), 8)  # reads at the address, not the scalar's bytes
        assert out.tolist() == list(range(8, 16))
        pyoffload.memcpy(as_np(a.ptr), np.full(8, 9, np.uint8), 8)
        assert read(a, np.uint8, 8).tolist() == [9] * 8
        pyoffload.memcpy(a, np.arange(64, dtype=np.uint8))
    with pytest.raises(TypeError):
        pyoffload.mem_info(np.float64(a.ptr))
    with pytest.raises(TypeError):
        pyoffload.free(np.bool_(True))
    pyoffload.free((signed or (np.uint64,))[0](a.ptr))
    assert not a.live
    b = _alloc(device, 16)
    pyoffload.free(np.uint64(b.ptr))
    with pytest.raises(OffloadError) as err:
        pyoffload.mem_info(np.uint64(b.ptr))
    assert err.value.errc is Errc.NOT_FOUND


def test_copy_from_a_pointer_into_an_allocation(device):
    a = _alloc(device, 256)
    pyoffload.memcpy(a, np.arange(256, dtype=np.uint8))
    out = np.zeros(16, np.uint8)
    pyoffload.memcpy(out, a.ptr + 200, 16)
    assert out.tolist() == list(range(200, 216))
    a.free()


def test_copy_between_two_contexts(device):
    c1, c2 = pyoffload.Context([device]), pyoffload.Context([device])
    a, b = c1.alloc(4096), c2.alloc(4096)
    data = np.random.default_rng(9).integers(0, 256, 4096, dtype=np.uint8)
    pyoffload.memcpy(a, data)
    pyoffload.memcpy(b, a)
    assert np.array_equal(read(b, np.uint8, 4096), data)
    c1.close()
    c2.close()


def test_copy_between_devices_of_a_platform(device_pair):
    a, b = device_pair
    x, y = a.alloc(1 << 16), b.alloc(1 << 16)
    data = np.random.default_rng(5).integers(0, 256, 1 << 16, dtype=np.uint8)
    pyoffload.memcpy(x, data)
    q = a.create_queue()
    q.memcpy(y, x).wait()
    assert np.array_equal(read(y, np.uint8, 1 << 16), data)
    q.destroy()
    x.free()
    y.free()


def test_copy_across_backends(cross_pair):
    dev, host = cross_pair
    a, h = dev.alloc(4096), host.alloc(4096)
    data = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    pyoffload.memcpy(h, data)
    pyoffload.memcpy(a, h)
    out = np.zeros(4096, np.uint8)
    pyoffload.memcpy(out, a)
    assert np.array_equal(out, data)
    a.free()
    h.free()


def test_queued_copy_across_backends_on_the_host_queue(cross_pair):
    """A queue of one backend orders a copy touching another backend's memory (as a host function)."""
    dev, host = cross_pair
    a = dev.alloc(4096)
    hq = host.create_queue()
    data = np.full(4096, 11, np.uint8)
    hq.memcpy(a, data).wait()
    assert (read(a, np.uint8, 4096) == 11).all()
    hq.destroy()
    a.free()


def test_queue_of_another_context_is_refused(device):
    other = pyoffload.Context([device])
    q = other.create_queue(device)
    a = device.alloc(64)
    with pytest.raises(OffloadError) as err:
        q.memcpy(a, np.zeros(64, np.uint8))
    assert err.value.errc is Errc.INVALID_ARGUMENT
    with pytest.raises(OffloadError) as err:
        q.memfill(a, b"\x00")
    assert err.value.errc is Errc.INVALID_ARGUMENT
    q.destroy()
    other.close()
    a.free()


def test_synchronous_copy_waits_for_queued_work_on_its_memory(device, kernels, queue):
    gate = threading.Event()
    a = _alloc(device, 4 * 64)
    queue.launch_host_function(gate.wait)
    queue.launch(kernels.kernel("iota_i32"), 2, 32, [a, np.int32(64), np.int32(5)])
    out = np.zeros(64, np.int32)
    t = threading.Thread(target=pyoffload.memcpy, args=(out, a))
    t.start()
    t.join(0.2)
    assert t.is_alive(), "a synchronous copy read memory queued work was about to write"
    gate.set()
    t.join(10)
    assert np.array_equal(out, np.arange(5, 69, dtype=np.int32))
    a.free()


def test_zero_sized_operations_do_nothing(device, queue):
    a = _alloc(device, 16)
    pyoffload.memfill(a, b"\x07")
    pyoffload.memcpy(a, np.zeros(16, np.uint8), 0)
    pyoffload.memfill(a, b"\x00", 0)
    assert queue.memcpy(a, np.zeros(16, np.uint8), 0).is_complete
    assert (read(a, np.uint8, 16) == 7).all()
    a.free()
