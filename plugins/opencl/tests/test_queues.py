"""Queues, prepared launches, host functions and profiling on OpenCL command queues."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import pyoffload
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


def test_profiling_events(dev, kernels) -> None:
    q = dev.create_queue(profiling=True)
    out = dev.alloc(8)
    first = q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(200000)])
    last = q.launch(kernels.kernel("noop"), 1, 1, [])
    q.wait()
    span = last.elapsed_ms(first)
    own = first.elapsed_ms(first)  # one command: its own duration
    assert span >= own > 0
    q.destroy()


def test_events_without_profiling_have_no_times(dev, kernels, queue) -> None:
    ev = queue.launch(kernels.kernel("noop"), 1, 1, [])
    ev.wait()
    assert ev.is_complete
    with pytest.raises(pyoffload.OffloadError):
        ev.elapsed_ms(ev)


def test_work_group_too_large_is_invalid_value(dev, kernels, queue) -> None:
    too_big = dev.info["max_work_group_size"] * 2
    with pytest.raises(pyoffload.OffloadError) as err:
        queue.launch(kernels.kernel("noop"), 1, too_big, []).wait()
    assert err.value.errc is pyoffload.Errc.INVALID_VALUE
