"""CUDA interop on the fake driver: DLPack device types, the CUDA array interface v3 with the
stream of pending work, and cuda.core's stream protocol on queues."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind


def test_dlpack_device_types_follow_the_allocation_kind(fake_runtime):
    dev = fake_runtime[1]
    for kind, dl_type in ((AllocKind.DEVICE, 2), (AllocKind.HOST, 3), (AllocKind.MANAGED, 13)):
        a = dev.alloc(256, kind)
        # HOST memory belongs to the context, not a device: DLPack's convention is id 0 for it
        assert a.__dlpack_device__() == (dl_type, 0 if kind is AllocKind.HOST else dev.index)
        a.free()


def test_cuda_array_interface_v3(fake_runtime):
    dev = fake_runtime[0]
    a = dev.alloc(4 * 64)
    view = a.typed(np.float32, (8, 8))
    cai = view.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (8, 8) and cai["typestr"] == "<f4"
    assert cai["data"] == (a.ptr, False) and cai["strides"] is None
    assert cai["stream"] is None  # nothing pending on the memory
    with pytest.raises(pyoffload.InvalidArgumentError, match="exported"):
        a.free()  # a consumer of the interface keeps the view: the view counts an export
    del view
    gc.collect()
    a.free()


def test_cuda_array_interface_names_the_stream_of_pending_work(fake_runtime):
    dev = fake_runtime[0]
    q = dev.create_queue()
    a = dev.alloc(1 << 20)
    q.memfill(a, np.uint8(1), 1 << 20)
    stream = a.__cuda_array_interface__["stream"]
    assert stream is None or stream == q.native  # pending: the queue's stream; finished meanwhile: none
    q.wait()
    assert a.__cuda_array_interface__["stream"] is None
    a.free()
    q.destroy()


def test_queues_speak_the_cuda_stream_protocol(fake_runtime):
    q = fake_runtime[0].create_queue()
    version, handle = q.__cuda_stream__()
    assert version == 0 and handle == q.native and isinstance(handle, int) and handle != 0
    q.destroy()


def test_host_device_queues_are_not_cuda_streams(fake_runtime):
    q = pyoffload.host_device().create_queue()
    with pytest.raises(AttributeError, match="not a CUDA stream"):
        q.__cuda_stream__()
    q.destroy()


def test_importing_our_own_memory_is_a_clear_error(fake_runtime):
    """DLPack import is for foreign memory; pyoffload's own already resolves by pointer."""
    a = fake_runtime[0].alloc(64, AllocKind.MANAGED)
    with pytest.raises(pyoffload.InvalidArgumentError, match="already knows"):
        pyoffload.from_dlpack(a.typed(np.int32))
    assert pyoffload.mem_info(a.ptr + 4).allocation is a
    a.free()
