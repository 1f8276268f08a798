"""Queues, events, host functions and asynchrony."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pyoffload import Errc, OffloadError

from ._util import read


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


def test_host_function_runs_in_order(device, kernels, queue):
    out = device.alloc(4 * 64)
    seen = []
    queue.launch(kernels.kernel("iota_i32"), 2, 32, [out, np.int32(64), np.int32(1)])
    queue.launch_host_function(lambda: seen.append(read(out, np.int32, 64).sum()))
    queue.wait()
    assert seen == [sum(range(1, 65))]
    out.free()


def test_host_function_blocks_later_work(device, kernels, queue):
    gate = threading.Event()
    out = device.alloc(4)
    queue.launch_host_function(gate.wait)
    queue.launch(kernels.kernel("bump"), 1, 1, [out])
    assert not queue.query(), "work after a blocked host function completed"
    gate.set()
    queue.wait()
    assert queue.query()
    out.free()


def test_host_function_error_surfaces_at_wait(device, queue):
    def boom():
        raise RuntimeError("boom in host function")

    queue.launch_host_function(boom)
    with pytest.raises(OffloadError, match="boom"):
        queue.wait()


def test_events_complete(device, kernels, queue):
    out = device.alloc(8)
    ev = queue.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(2_000_000)])
    ev.wait()
    assert ev.is_complete
    assert read(out, np.int64, 1)[0] == 2_000_000
    out.free()


def test_launch_is_asynchronous(device, kernels, queue):
    out = device.alloc(8)
    gate = threading.Event()
    queue.launch_host_function(gate.wait)
    ev = queue.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(10)])
    assert not ev.is_complete, "a launch behind a blocked host function reported completion"
    gate.set()
    ev.wait()
    assert ev.is_complete
    out.free()


def test_profiling_events(device, kernels):
    q = device.create_queue(profiling=True)
    out = device.alloc(8)
    e1 = q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(1000)])
    e2 = q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(5_000_000)])
    ms = e2.elapsed_ms(e1)
    assert ms >= 0.0
    q.destroy()
    out.free()


def test_queue_after_destroy(device, kernels):
    q = device.create_queue()
    q.destroy()
    with pytest.raises(OffloadError) as err:
        q.launch(kernels.kernel("noop"), 1, 1, [])
    assert err.value.errc is Errc.INVALID_QUEUE
    with pytest.raises(OffloadError) as err:
        q.wait()
    assert err.value.errc is Errc.INVALID_QUEUE
