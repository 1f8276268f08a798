"""Fills, after liboffload's olMemFill tests and Unified Runtime's urEnqueueUSMFill tests:
pattern widths from 1 to 17 bytes, sizes that are not a multiple of 4, fills queued behind
pending work, and the size errors.  Results are read in place from host-visible memory or
consumed by a kernel, not only copied back."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc

from ._util import alloc_or_skip, errc_of, in_place, launch_n, read
from ._util import loaded_once, shared_kernels  # noqa: F401 (fixtures)

# (pattern, fill size): widths 1, 2, 4, 16, 17 (a packed struct) and 3 (not a power of two);
# 1023 and 1022 are not multiples of 4.
CASES = [
    (b"\x42", 1024),
    (b"\x42", 1023),
    (np.uint16(0x4243).tobytes(), 1022),
    (np.uint32(0xDEADBEEF).tobytes(), 1024),
    (b"\xff" * 16, 1024),
    (b"\xff" * 16 + b"\x7f", 17 * 64),
    (b"\x11\x22\x33", 3 * 1000),
]
CASE_IDS = [f"{len(p)}B-x{n}" for p, n in CASES]


@pytest.mark.parametrize("pattern,size", CASES, ids=CASE_IDS)
def test_fill_of_managed_memory_read_in_place(device, queue, pattern, size):
    a = alloc_or_skip(device, size, AllocKind.MANAGED)
    queue.memfill(a, pattern, size)
    queue.wait()
    assert in_place(a, np.uint8).tobytes() == pattern * (size // len(pattern))
    a.free()


@pytest.mark.parametrize("width", [1, 4, 16])
def test_queued_fill_waits_for_earlier_work(device, queue, width):
    """A fill behind a blocked host function has not happened until the function returns."""
    a = alloc_or_skip(device, 1024, AllocKind.MANAGED)
    np.frombuffer(a, np.uint8)[:] = 0
    gate = threading.Event()
    queue.launch_host_function(gate.wait)
    pattern = bytes(range(1, width + 1))
    ev = queue.memfill(a, pattern)
    assert not ev.is_complete and not queue.query()
    assert not in_place(a, np.uint8).any(), "the fill ran before the work queued ahead of it"
    gate.set()
    ev.wait()
    assert in_place(a, np.uint8).tobytes() == pattern * (1024 // width)
    assert queue.query()
    a.free()


def test_small_fill_of_device_memory_with_a_three_byte_pattern(device, queue):
    a = device.alloc(6)
    queue.memfill(a, b"\x11\x22\x33", 6)
    out = np.zeros(6, np.uint8)
    queue.memcpy(out, a).wait()
    assert out.tobytes() == b"\x11\x22\x33" * 2
    a.free()


def test_fill_result_is_what_a_kernel_reads(device, shared_kernels, queue):
    """y = 1.0 and x = 0.5 by fills; y += 2x by a kernel: the fills are seen by device code."""
    n = 300
    x, y = device.alloc(4 * n), device.alloc(4 * n)
    queue.memfill(x, np.float32(0.5))
    queue.memfill(y, np.float32(1.0))
    launch_n(queue, shared_kernels.kernel("axpy_f32"), n, [y, x, np.float32(2.0), np.int32(n)])
    assert (read(y, np.float32, n) == 2.0).all()
    x.free()
    y.free()


def test_fill_overwrites_what_a_kernel_wrote(device, shared_kernels, queue):
    n = 64
    a = device.alloc(4 * n)
    queue.launch(shared_kernels.kernel("iota_i32"), 2, 32, [a, np.int32(n), np.int32(0)])
    queue.memfill(a.ptr + 4 * 16, np.int32(-7), 4 * 32)
    queue.wait()
    expect = np.arange(n, dtype=np.int32)
    expect[16:48] = -7
    assert np.array_equal(read(a, np.int32, n), expect)
    a.free()


def test_pattern_larger_than_the_fill_is_an_invalid_size(device, queue):
    a = device.alloc(4)
    pyoffload.memfill(a, b"\x01")
    assert errc_of(queue.memfill, a, np.uint64(0x4242424242424242), 4) is Errc.INVALID_SIZE
    queue.wait()
    assert (read(a, np.uint8, 4) == 1).all(), "a refused fill wrote"
    a.free()


@pytest.mark.parametrize("queued", [False, True], ids=["sync", "queued"])
def test_size_not_a_multiple_of_the_pattern_changes_nothing(device, queue, queued):
    a = device.alloc(1025)
    pyoffload.memfill(a, b"\x00")
    fill = queue.memfill if queued else pyoffload.memfill
    assert errc_of(fill, a, np.uint16(0x4242), 1025) is Errc.INVALID_SIZE
    queue.wait()
    assert not read(a, np.uint8, 1025).any(), "a refused fill wrote"
    a.free()


def test_fill_past_the_end_is_an_invalid_size(device, queue):
    a = device.alloc(64)
    assert errc_of(queue.memfill, a.ptr + 60, np.uint32(1), 8) is Errc.INVALID_SIZE
    assert errc_of(pyoffload.memfill, a, b"\x00", 65) is Errc.INVALID_SIZE
    a.free()


def test_empty_pattern_is_an_invalid_size(device, queue):
    a = device.alloc(16)
    assert errc_of(queue.memfill, a, b"", 16) is Errc.INVALID_SIZE
    a.free()


def test_queued_fill_of_size_zero_does_nothing(device, queue):
    a = device.alloc(8)
    pyoffload.memfill(a, b"\x05")
    assert queue.memfill(a, np.uint32(0), 0).is_complete
    queue.wait()
    assert (read(a, np.uint8, 8) == 5).all()
    a.free()


def test_fill_of_freed_memory_is_refused(device, queue):
    a = device.alloc(16)
    a.free()
    assert errc_of(queue.memfill, a, b"\x00") is Errc.INVALID_ARGUMENT
