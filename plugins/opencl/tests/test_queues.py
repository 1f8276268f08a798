"""Queues, prepared launches, host functions and profiling on OpenCL command queues."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import pyoffload
import pyoffload.backend
from pyoffload import AllocKind


def _ints(alloc, n: int) -> list[int]:
    return np.frombuffer(ctypes.string_at(alloc.ptr, 4 * n), np.int32).tolist()


def test_prepared_launch_keeps_its_own_arguments(dev, kernels, queue) -> None:
    a = dev.alloc(16, AllocKind.MANAGED)
    b = dev.alloc(16, AllocKind.MANAGED)
    iota = kernels.kernel("iota_i32")
    prepared = queue.prepare(iota, 1, 4, [a, np.int32(4), np.int32(100)])
    queue.launch(iota, 1, 4, [b, np.int32(4), np.int32(7)])  # same kernel, other arguments
    ctypes.memset(a.ptr, 0, 16)
    queue.wait()
    prepared().wait()
    assert _ints(a, 4) == [100, 101, 102, 103]
    assert _ints(b, 4) == [7, 8, 9, 10]


def test_host_function_runs_between_kernels(dev, kernels, queue) -> None:
    y = dev.alloc(64, AllocKind.MANAGED)
    x = dev.alloc(64, AllocKind.MANAGED)
    ctypes.memmove(y.ptr, np.zeros(16, np.float32).tobytes(), 64)
    ctypes.memmove(x.ptr, np.zeros(16, np.float32).tobytes(), 64)
    gate = threading.Event()
    seen = []

    def host_step() -> None:
        gate.wait()
        seen.append(np.frombuffer(ctypes.string_at(y.ptr, 64), np.float32).tolist())
        ctypes.memmove(x.ptr, np.full(16, 2.0, np.float32).tobytes(), 64)

    axpy = kernels.kernel("axpy_f32")
    queue.launch(kernels.kernel("sleep_spin"), 1, 1, [dev.alloc(8), np.int64(100000)])
    queue.launch(axpy, 1, 16, [y, x, np.float32(1.0), np.int32(16)])  # x is 0: y stays 0
    queue.launch_host_function(host_step)
    queue.launch(axpy, 1, 16, [y, x, np.float32(1.0), np.int32(16)])  # must see x = 2
    assert not queue.query()
    gate.set()
    queue.wait()
    assert queue.query()
    assert seen == [[0.0] * 16]
    assert np.frombuffer(ctypes.string_at(y.ptr, 64), np.float32).tolist() == [2.0] * 16


def test_profiling_events_are_markers_with_timestamps(dev, kernels) -> None:
    q = dev.create_queue(profiling=True)
    out = dev.alloc(8)
    first = q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(200000)])
    last = q.launch(kernels.kernel("noop"), 1, 1, [])
    q.wait()
    assert last.elapsed_ms(first) > 0  # from the end of the spin to the end of the noop
    assert first.elapsed_ms(first) == 0.0
    q.destroy()


def test_events_without_profiling_have_no_times(dev, kernels, queue) -> None:
    ev = queue.launch(kernels.kernel("noop"), 1, 1, [])
    ev.wait()
    assert ev.is_complete
    a, b = queue.record(), queue.record()  # markers, but the queue has no PROFILING_ENABLE
    with pytest.raises(pyoffload.UnsupportedError):
        b.elapsed_ms(a)


def test_cross_queue_waits_are_barriers_with_a_wait_list(dev, kernels) -> None:
    from pyoffload_opencl.plugin import queue_wait_events_impl

    q1, q2 = dev.create_queue(), dev.create_queue()
    spin_out, flag = dev.alloc(8), dev.alloc(4, AllocKind.MANAGED)
    ctypes.memset(flag.ptr, 0, 4)
    q1.launch(kernels.kernel("sleep_spin"), 1, 1, [spin_out, np.int64(3_000_000)])
    q1.launch(kernels.kernel("iota_i32"), 1, 1, [flag, np.int32(1), np.int32(5)])
    q2.wait_events(q1.record())
    q2.launch(kernels.kernel("bump"), 1, 1, [flag])  # must run after iota: the counter overwrites 5
    q2.wait()
    assert _ints(flag, 1) == [1]
    # Natively ordered within a context; events of another context fall back to the generic wait.
    marker = q1.record().marker.handle
    assert queue_wait_events_impl(dev.handle, q2.handle, [marker]) is True
    other = pyoffload.Context([dev])
    q3 = dev.create_queue(context=other)
    assert queue_wait_events_impl(dev.handle, q3.handle, [marker]) is None
    for q in (q1, q2, q3):
        q.destroy()
    other.close()


def test_native_queue_handles(dev, kernels) -> None:
    import pyopencl as cl

    q = dev.create_queue()
    native = q.native
    assert isinstance(native, int) and native == q.handle.cl_queue.int_ptr
    ctx = dev.default_context.native
    own = cl.CommandQueue(ctx, dev.native)
    for wrapped in (pyoffload.Queue.from_native(own, dev), pyoffload.Queue.from_native(own.int_ptr, dev)):
        out = dev.alloc(16, AllocKind.MANAGED)
        wrapped.launch(kernels.kernel("iota_i32"), 1, 4, [out, np.int32(4), np.int32(3)]).wait()
        assert _ints(out, 4) == [3, 4, 5, 6]
        wrapped.destroy()
    own.finish()  # still usable: destroying the wrappers left it alone
    with pytest.raises(pyoffload.UnsupportedError):
        pyoffload.Queue.from_native(own, dev, profiling=True)
    with pytest.raises(pyoffload.InvalidArgumentError):
        pyoffload.Queue.from_native(cl.CommandQueue(cl.Context([dev.native])), dev)
    q.destroy()


def test_kernel_attributes(dev, kernels) -> None:
    attrs = kernels.kernel("local_reverse").attributes
    assert 1 <= attrs["max_work_group_size"] <= dev.info["max_work_group_size"]
    assert attrs["preferred_work_group_multiple"] >= 1
    assert attrs["local_memory_bytes"] >= 0 and attrs["private_memory_bytes"] >= 0
    assert set(pyoffload.backend.KERNEL_ATTRIBUTE_KEYS) <= set(attrs)
