"""A kernel that traps: the launch fails at run time (``UNKNOWN``, as liboffload reports a kernel
that failed on the device), its event raises on every wait and the queue's next wait raises once;
the queue keeps working and other queues are unaffected.

Runs on devices whose conformance ``kernels`` image has a ``trap(out, n, at)`` kernel (items below
``n`` write 1 to ``out[i]``; the item with global id ``at`` traps, none when ``at < 0``)."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, OffloadError

from ._util import read


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        if "trap" not in {s.name for s in prog.symbols() if s.kind is pyoffload.SymbolKind.KERNEL}:
            pytest.skip(f"{device.id}: its conformance kernels have no 'trap' kernel")
        yield prog


def _trap(queue, kernels, out, at, grid=4, block=16):
    return queue.launch(kernels.kernel("trap"), grid, block, [out, np.int32(grid * block), np.int32(at)])


def test_the_trap_kernel_runs_without_trapping(device, kernels, queue):
    out = device.alloc(4 * 64)
    pyoffload.memfill(out, np.int32(0), 4 * 64)
    _trap(queue, kernels, out, -1).wait()
    queue.wait()
    assert (read(out, np.int32, 64) == 1).all()
    out.free()


def test_a_trap_fails_the_launch_at_its_event_every_time_and_at_the_queue_once(device, kernels, queue):
    out = device.alloc(4 * 64)
    ev = _trap(queue, kernels, out, 37)
    for _ in range(2):
        with pytest.raises(OffloadError) as err:
            ev.wait()
        assert err.value.errc is Errc.UNKNOWN, err.value
    with pytest.raises(OffloadError) as err:
        queue.wait()
    assert err.value.errc is Errc.UNKNOWN
    queue.wait()  # reported once
    out.free()


def test_a_queue_wait_that_sees_the_trap_first_reports_it_once(device, kernels, queue):
    out = device.alloc(4 * 64)
    ev = _trap(queue, kernels, out, 0)
    queue.launch(kernels.kernel("noop"), 1, 1, [])
    with pytest.raises(OffloadError) as err:
        queue.wait()
    assert err.value.errc is Errc.UNKNOWN
    queue.wait()
    with pytest.raises(OffloadError):
        ev.wait()  # the failed launch's own event still says so
    out.free()


def test_the_queue_keeps_working_after_a_trap(device, kernels, queue):
    out = device.alloc(4 * 64)
    with pytest.raises(OffloadError):
        _trap(queue, kernels, out, 5).wait()
    with pytest.raises(OffloadError):
        queue.wait()
    queue.launch(kernels.kernel("iota_i32"), 4, 16, [out, np.int32(64), np.int32(3)]).wait()
    queue.wait()
    assert np.array_equal(read(out, np.int32, 64), np.arange(3, 67, dtype=np.int32))
    out.free()


def test_a_trap_leaves_other_queues_alone(device, kernels, queue):
    other = device.create_queue()
    a, b = device.alloc(4 * 64), device.alloc(4 * 64)
    failed = _trap(queue, kernels, a, 63)
    other.launch(kernels.kernel("iota_i32"), 4, 16, [b, np.int32(64), np.int32(0)]).wait()
    other.wait()
    assert np.array_equal(read(b, np.int32, 64), np.arange(64, dtype=np.int32))
    with pytest.raises(OffloadError):
        failed.wait()
    with pytest.raises(OffloadError):
        queue.wait()
    other.destroy()
    a.free()
    b.free()


def test_querying_a_failed_queue_does_not_swallow_the_failure(device, kernels, queue):
    """``query()`` says whether the work completed; the failure is still the next wait's to raise."""
    import time

    out = device.alloc(4 * 64)
    _trap(queue, kernels, out, 3)
    deadline = time.monotonic() + 30
    while True:
        try:
            if queue.query():
                break
        except OffloadError as exc:  # a backend may report the failure from the query as well
            assert exc.errc is Errc.UNKNOWN
            break
        assert time.monotonic() < deadline, "the trapping launch never completed"
        time.sleep(0.001)
    with pytest.raises(OffloadError) as err:
        queue.wait()
    assert err.value.errc is Errc.UNKNOWN
    queue.wait()  # reported once
    out.free()
