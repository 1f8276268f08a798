"""Events and cross-queue ordering (liboffload's olCreateEvent/olWaitEvents/olGetEventElapsedTime)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, OffloadError

from ._util import read


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


def test_record_marks_everything_before_it(device, kernels, queue):
    gate = threading.Event()
    out = device.alloc(8)
    queue.launch_host_function(gate.wait)
    queue.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(1000)])
    ev = queue.record()
    assert not ev.is_complete
    gate.set()
    ev.wait()
    assert ev.is_complete and read(out, np.int64, 1)[0] == 1000
    out.free()


def test_record_on_an_idle_queue_completes(device, queue):
    ev = queue.record()
    ev.wait()
    assert ev.is_complete


def test_wait_events_orders_another_queue_without_blocking_the_host(device, kernels):
    q1, q2 = device.create_queue(), device.create_queue()
    gate = threading.Event()
    buf = device.alloc(4 * 64)
    q1.launch_host_function(gate.wait)
    q1.launch(kernels.kernel("iota_i32"), 1, 64, [buf, np.int32(64), np.int32(7)])
    done = q1.record()
    q2.wait_events(done)  # returns at once although q1 is held back
    out = np.zeros(64, np.int32)
    copied = q2.memcpy(out, buf)
    assert not copied.is_complete, "q2's copy ran before the event it waits for"
    gate.set()
    copied.wait()
    assert (out == np.arange(7, 71)).all(), "q2 read the buffer before q1 wrote it"
    buf.free()
    q1.destroy()
    q2.destroy()


def test_wait_events_of_a_completed_event_is_a_no_op(device, queue):
    other = device.create_queue()
    ev = other.record()
    ev.wait()
    queue.wait_events(ev)
    queue.record().wait()
    other.destroy()


def test_wait_events_across_backends(device, kernels, queue):
    host = pyoffload.host_device()
    if device is host:
        pytest.skip("needs a device of another backend")
    hq = host.create_queue()
    gate = threading.Event()
    hq.launch_host_function(gate.wait)
    host_done = hq.record()
    buf = device.alloc(4 * 64)
    queue.wait_events(host_done)
    queue.launch(kernels.kernel("iota_i32"), 1, 64, [buf, np.int32(64), np.int32(1)])
    after = queue.record()
    assert not after.is_complete, "work ran before the other backend's event"
    gate.set()
    after.wait()
    assert (read(buf, np.int32, 64) == np.arange(1, 65)).all()
    buf.free()
    hq.destroy()


def test_wait_events_takes_only_events(queue):
    with pytest.raises(TypeError):
        queue.wait_events("not an event")


def test_elapsed_time_between_recorded_events(device, kernels):
    q = device.create_queue(profiling=True)
    out = device.alloc(8)
    start = q.record()
    q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(2_000_000)])
    end = q.record()
    try:
        ms = end.elapsed_ms(start)
    except pyoffload.UnsupportedError:
        pytest.skip(f"{device.id} reports no timestamps")
    assert ms > 0.0, "a busy kernel took no time"
    assert start.elapsed_ms(start) == 0.0 or abs(start.elapsed_ms(start)) < 1e-3
    out.free()
    q.destroy()


def test_elapsed_time_is_ordered(device, kernels):
    q = device.create_queue(profiling=True)
    out = device.alloc(8)
    e0 = q.record()
    q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(500_000)])
    e1 = q.record()
    q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(500_000)])
    e2 = q.record()
    try:
        first, both = e1.elapsed_ms(e0), e2.elapsed_ms(e0)
    except pyoffload.UnsupportedError:
        pytest.skip(f"{device.id} reports no timestamps")
    assert 0 < first < both, "timestamps are not ordered"
    out.free()
    q.destroy()


def test_elapsed_time_across_devices_is_an_invalid_argument(device):
    others = [d for d in pyoffload.devices() if d is not device]
    if not others:
        pytest.skip("needs a second device")
    q1 = device.create_queue(profiling=True)
    q2 = others[0].create_queue(profiling=True)
    a, b = q1.record(), q2.record()
    with pytest.raises(OffloadError) as err:
        b.elapsed_ms(a)
    assert err.value.errc is Errc.INVALID_ARGUMENT and "devices" in str(err.value)
    q1.destroy()
    q2.destroy()


def test_event_wait_after_its_queue_was_destroyed(device):
    q = device.create_queue()
    ev = q.record()
    q.destroy()
    ev.wait()  # the queue finished its work before it went: the event is complete
    assert ev.is_complete


def test_waits_with_a_timeout_give_up_and_leave_the_work_going(device, kernels, queue):
    """``Event.wait(timeout=)`` and ``Queue.wait(timeout=)`` return ``False`` once the time has
    passed (the work goes on), ``True`` once it has completed."""
    gate = threading.Event()
    out = device.alloc(8)
    try:
        queue.launch_host_function(gate.wait)  # holds everything after it back
        queue.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(1000)])
        ev = queue.record()
        assert ev.wait(timeout=0) is False
        assert ev.wait(timeout=0.05) is False
        assert queue.wait(timeout=0.05) is False
        assert not ev.is_complete
        gate.set()
        assert ev.wait(timeout=60) is True
        assert queue.wait(timeout=60) is True
        assert read(out, np.int64, 1)[0] == 1000  # the launch ran after the timed-out waits
        assert ev.wait() is True and queue.wait() is True
    finally:
        gate.set()
        queue.wait()
        out.free()


def test_a_timed_wait_raises_the_failure_of_the_work(device, queue):
    def boom():
        raise RuntimeError("host function failed")

    ev = queue.launch_host_function(boom)
    with pytest.raises(OffloadError) as err:
        ev.wait(timeout=60)
    assert "host function failed" in str(err.value) or isinstance(err.value.__cause__, RuntimeError)
    with pytest.raises(OffloadError):  # and once on the queue, as after a plain wait
        queue.wait(timeout=60)
    assert queue.wait(timeout=60) is True


@pytest.mark.parametrize("timeout", [-1, -0.5, float("nan")])
def test_a_negative_timeout_is_invalid_value(queue, timeout):
    ev = queue.record()
    for call in (lambda: ev.wait(timeout=timeout), lambda: queue.wait(timeout=timeout)):
        gate = threading.Event()
        queue.launch_host_function(gate.wait)
        try:
            with pytest.raises(OffloadError) as err:
                call()
            assert err.value.errc is Errc.INVALID_VALUE and "timeout" in str(err.value)
        finally:
            gate.set()
            queue.wait()


@pytest.mark.parametrize("timeout", ["1", True, [1]])
def test_a_timeout_that_is_not_a_number_is_a_type_error(queue, timeout):
    gate = threading.Event()
    queue.launch_host_function(gate.wait)
    try:
        with pytest.raises(TypeError, match="timeout"):
            queue.wait(timeout=timeout)
    finally:
        gate.set()
        queue.wait()


def test_profiling_info_times_each_operation(device, kernels):
    # urEventGetProfilingInfo / clGetEventProfilingInfo: the operation's own timestamps, in
    # order; "started" and "ended" on every backend, the others where the driver gives them.
    out = device.alloc(4 * 256)
    with device.create_queue(profiling=True) as q:
        first = q.launch(kernels.kernel("iota_i32"), 8, 32, [out, np.int32(256), np.int32(0)])
        second = q.memcpy(np.zeros(256, np.int32), out)
        stamps = []
        for ev in (first, second):
            got = {}
            for which in ("queued", "submitted", "started", "ended"):
                try:
                    got[which] = ev.profiling_info(which)
                except OffloadError as exc:
                    assert exc.errc is Errc.UNSUPPORTED and which in ("queued", "submitted"), (which, exc)
            assert "started" in got and "ended" in got
            values = list(got.values())
            assert values == sorted(values), got
            assert all(isinstance(v, int) for v in values)
            stamps.append(got)
        assert stamps[0]["ended"] <= stamps[1]["started"]  # an in-order queue
        with pytest.raises(OffloadError) as err:
            first.profiling_info("finished")
        assert err.value.errc is Errc.INVALID_ARGUMENT
        with pytest.raises(OffloadError) as err:
            q.record().profiling_info("ended")  # a point, not an operation
        assert err.value.errc is Errc.INVALID_ARGUMENT
    out.free()


def test_profiling_info_needs_a_profiling_queue(device, kernels, queue):
    out = device.alloc(4 * 32)
    ev = queue.launch(kernels.kernel("iota_i32"), 1, 32, [out, np.int32(32), np.int32(0)])
    with pytest.raises(OffloadError) as err:
        ev.profiling_info("ended")
    assert err.value.errc is Errc.INVALID_ARGUMENT
    with pytest.raises(TypeError):
        ev.profiling_info(3)
    queue.wait()
    out.free()
