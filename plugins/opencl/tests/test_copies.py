"""Synchronous copies on OpenCL: each is one ``clEnqueueSVMMemcpy`` and one ``clFinish``, entered
through the copy hook and ``queue_synchronize_impl`` alone (no helper frames of the backend), for
every kind of host buffer the hooks can be handed."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np
import pytest

import pyoffload
import pyoffload_opencl

PLUGIN = os.path.dirname(pyoffload_opencl.__file__) + os.sep


def backend_frames(op: Any, repeat: int = 5) -> list[str]:
    """Names of the backend's Python functions entered per call of ``op`` (after a warm-up)."""
    for _ in range(3):
        op()
    names: list[str] = []
    me = threading.get_ident()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and threading.get_ident() == me and frame.f_code.co_filename.startswith(PLUGIN):
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        for _ in range(repeat):
            op()
    finally:
        sys.setprofile(None)
    return names[: len(names) // repeat]


def test_each_copy_is_the_hook_and_the_synchronisation_alone(dev) -> None:
    a, b = dev.alloc(4096), dev.alloc(4096)
    host = np.zeros(4096, np.uint8)
    assert backend_frames(lambda: pyoffload.memcpy(a, host)) == ["data_submit_impl", "queue_synchronize_impl"]
    assert backend_frames(lambda: pyoffload.memcpy(host, a)) == ["data_retrieve_impl", "queue_synchronize_impl"]
    assert backend_frames(lambda: pyoffload.memcpy(b, a)) == ["data_exchange_impl", "queue_synchronize_impl"]
    a.free()
    b.free()


@pytest.mark.parametrize("src", [
    bytes(range(256)) * 4,  # read-only
    memoryview(bytearray(range(256)) * 5)[100:1124],  # writable, at an offset into a larger buffer
    np.arange(256, dtype=np.int32),  # multi-byte items
])
def test_host_buffers_of_every_kind_round_trip(dev, src) -> None:
    data = bytes(memoryview(src).cast("B"))
    a, b = dev.alloc(len(data)), dev.alloc(len(data))
    pyoffload.memcpy(a, src)
    pyoffload.memcpy(b, a)
    out = bytearray(len(data) + 16)
    pyoffload.memcpy(memoryview(out)[8:8 + len(data)], b)
    assert bytes(out[8:8 + len(data)]) == data
    assert bytes(out[:8]) == bytes(8) and bytes(out[-8:]) == bytes(8)
    a.free()
    b.free()


def test_interior_pointers_and_partial_sizes(dev) -> None:
    a = dev.alloc(1024)
    pyoffload.memcpy(a, np.zeros(1024, np.uint8))
    pyoffload.memcpy(a.ptr + 100, np.full(50, 9, np.uint8))
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
