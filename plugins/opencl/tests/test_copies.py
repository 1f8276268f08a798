"""Synchronous copies on OpenCL, for every kind of host buffer the hooks can be handed."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload


@pytest.mark.parametrize(
    "src",
    [
        bytes(range(256)) * 4,  # read-only
        memoryview(bytearray(range(256)) * 5)[100:1124],  # writable, at an offset into a larger buffer
        np.arange(256, dtype=np.int32),  # multi-byte items
    ],
)
def test_host_buffers_of_every_kind_round_trip(dev, src) -> None:
    data = bytes(memoryview(src).cast("B"))
    a, b = dev.alloc(len(data)), dev.alloc(len(data))
    pyoffload.memcpy(a, src)
    pyoffload.memcpy(b, a)
    out = bytearray(len(data) + 16)
    pyoffload.memcpy(memoryview(out)[8 : 8 + len(data)], b)
    assert bytes(out[8 : 8 + len(data)]) == data
    assert bytes(out[:8]) == bytes(8) and bytes(out[-8:]) == bytes(8)
    a.free()
    b.free()


def test_interior_pointers_and_partial_sizes(dev) -> None:
    a = dev.alloc(1024)
    pyoffload.memcpy(a, np.zeros(1024, np.uint8))
    pyoffload.memcpy(a.ptr + 100, np.full(50, 9, np.uint8), 50)  # a size: 924 bytes lie past a.ptr + 100
    b = dev.alloc(1024)
    pyoffload.memcpy(b, np.zeros(1024, np.uint8))
    pyoffload.memcpy(b.ptr + 10, a.ptr + 90, 70)
    out = np.zeros(1024, np.uint8)
    pyoffload.memcpy(out, b)
    expect = np.zeros(1024, np.uint8)
    expect[20:70] = 9
    assert (out == expect).all()
    a.free()
    b.free()


def test_device_ranges_are_named_by_cached_tags_bounded_per_context(dev, monkeypatch) -> None:
    from pyoffload_opencl import svm

    a = dev.alloc(256)
    host = np.arange(256, dtype=np.uint8)
    tags = a.context.handle.svm_tags
    tags.clear()
    pyoffload.memcpy(a, host)
    pyoffload.memcpy(a, host)
    assert list(tags) == [(a.ptr, 256)]  # one tag, reused
    monkeypatch.setattr(svm, "TAGS_MAX", 4)
    for n in range(1, 10):
        pyoffload.memcpy(a, host, n)
        assert len(tags) <= 4
    out = np.zeros(256, np.uint8)
    pyoffload.memcpy(out, a)
    assert (out == host).all()
    a.free()


def test_a_tag_outlives_its_memory_harmlessly(dev) -> None:
    # A tag names an address and a size only: memory freed and allocated again at the same
    # address (the pool reuses blocks) copies correctly through the cached tag.
    a = dev.alloc(512)
    ptr = a.ptr
    pyoffload.memcpy(a, np.full(512, 1, np.uint8))
    a.free()
    b = dev.alloc(512)
    assert b.ptr == ptr or (b.ptr, 512) not in b.context.handle.svm_tags
    pyoffload.memcpy(b, np.full(512, 2, np.uint8))
    out = np.zeros(512, np.uint8)
    pyoffload.memcpy(out, b)
    assert (out == 2).all()
    b.free()
