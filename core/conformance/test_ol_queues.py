"""Queues, events and host functions, after liboffload's olCreateQueue / olWaitQueue /
olQueryQueue / olGetQueueInfo / olDestroyQueue, olCreateEvent / olWaitEvents / olGetEventInfo and
olLaunchHostFunction tests: chains of events across many queues, what a destroyed queue refuses,
and how failures of queued work are reported."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc

from ._util import alloc_or_skip, errc_of, in_place, read
from ._util import loaded_once, shared_kernels  # noqa: F401 (fixtures)

CHAIN = 16


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


def test_queue_reports_its_device_and_context(device):
    q = device.create_queue()
    p = device.create_queue(profiling=True)
    assert q.device is device and q.context is device.default_context
    assert not q.profiling and p.profiling and q is not p
    ctx = pyoffload.Context([device])
    r = ctx.create_queue(device)
    assert r.context is ctx and r.device is device
    for each in (q, p, r):
        each.destroy()
    ctx.close()


def test_an_empty_queue_is_complete(device, queue):
    assert queue.query()
    queue.wait()
    assert queue.query()


def test_event_reports_its_queue_and_completion(device, kernels, queue):
    out = device.alloc(4)
    ev = queue.launch(kernels.kernel("bump"), 1, 1, [out])
    rec = queue.record()
    assert ev.queue is queue and rec.queue is queue
    rec.wait()
    assert rec.is_complete and ev.is_complete
    assert read(out, np.int32, 1)[0] == 1
    out.free()


def _chain(device, queues, wait_all):
    """Host functions on ``queues`` ordered only by events; the first queue is held back."""
    gate, order, events = threading.Event(), [], []
    queues[0].launch_host_function(gate.wait)
    for i, q in enumerate(queues):
        if events:
            q.wait_events(*(events if wait_all else events[-1:]))
        q.launch_host_function(lambda i=i: order.append(i))
        events.append(q.record())
    assert not events[-1].is_complete, "the last event completed while the first queue was held"
    gate.set()
    events[-1].wait()
    return order, events


@pytest.mark.parametrize("wait_all", [False, True], ids=["previous", "all-previous"])
def test_wait_events_chain_across_many_queues(device, wait_all):
    queues = [device.create_queue() for _ in range(CHAIN)]
    order, events = _chain(device, queues, wait_all)
    assert order == list(range(CHAIN)), "work ran before the event it waited for"
    assert all(ev.is_complete for ev in events)
    for q in queues:
        q.destroy()


def test_wait_events_chain_on_a_single_queue(device, queue):
    order, _ = _chain(device, [queue] * CHAIN, wait_all=False)
    assert order == list(range(CHAIN))


def test_wait_events_chain_orders_kernels_across_queues(device, kernels):
    """Each queue bumps one counter after the previous queue's bump: no update is lost."""
    queues = [device.create_queue() for _ in range(8)]
    out = device.alloc(4)
    pyoffload.memfill(out, np.int32(0))
    prev = None
    for q in queues:
        if prev is not None:
            q.wait_events(prev)
        q.launch(kernels.kernel("bump"), 1, 1, [out])
        prev = q.record()
    prev.wait()
    assert read(out, np.int32, 1)[0] == len(queues)
    for q in queues:
        q.destroy()


def test_host_functions_run_in_order(device, queue):
    """Each host function reads what the two before it wrote (a Fibonacci sequence)."""
    buf = [1, 1] + [0] * 14
    for i in range(2, 16):
        queue.launch_host_function(lambda i=i: buf.__setitem__(i, buf[i - 1] + buf[i - 2]))
    queue.wait()
    assert buf == [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]


def test_blocking_host_function_holds_back_a_kernel_writing_managed_memory(device, shared_kernels, queue):
    n = 64
    mem = alloc_or_skip(device, 4 * n, AllocKind.MANAGED)
    np.frombuffer(mem, np.int32)[:] = 0
    gate = threading.Event()
    queue.launch_host_function(gate.wait)
    queue.launch(shared_kernels.kernel("iota_i32"), 1, n, [mem, np.int32(n), np.int32(0)])
    assert not in_place(mem, np.int32).any(), "the kernel ran before the host function returned"
    gate.set()
    queue.wait()
    assert np.array_equal(in_place(mem, np.int32), np.arange(n, dtype=np.int32))
    mem.free()


def test_destroy_waits_for_outstanding_work(device, kernels):
    q = device.create_queue()
    out = device.alloc(4)
    pyoffload.memfill(out, np.int32(0))
    gate = threading.Event()
    q.launch_host_function(gate.wait)
    q.launch(kernels.kernel("bump"), 1, 1, [out])
    opener = threading.Timer(0.05, gate.set)
    opener.start()
    q.destroy()
    assert gate.is_set() and read(out, np.int32, 1)[0] == 1, "destroy returned before the queue's work ran"
    opener.join()
    out.free()


OPS = {
    "destroy": lambda q, a, k: q.destroy(),
    "record": lambda q, a, k: q.record(),
    "query": lambda q, a, k: q.query(),
    "memcpy": lambda q, a, k: q.memcpy(a, np.zeros(16, np.uint8)),
    "memfill": lambda q, a, k: q.memfill(a, b"\x00"),
    "host-function": lambda q, a, k: q.launch_host_function(lambda: None),
    "alloc-async": lambda q, a, k: q.alloc_async(64),
    "prepare": lambda q, a, k: q.prepare(k.kernel("noop"), 1, 1, []),
    "launch": lambda q, a, k: q.launch(k.kernel("noop"), 1, 1, []),
}


@pytest.mark.parametrize("op", list(OPS))
def test_a_destroyed_queue_refuses_every_operation(device, shared_kernels, op):
    q = device.create_queue()
    q.destroy()
    a = device.alloc(16)
    try:
        assert errc_of(OPS[op], q, a, shared_kernels) is Errc.INVALID_QUEUE
    finally:
        a.free()


def test_wait_events_on_a_destroyed_queue_is_invalid_queue(device):
    q, other = device.create_queue(), device.create_queue()
    done = other.record()
    done.wait()
    q.destroy()
    assert errc_of(q.wait_events, done) is Errc.INVALID_QUEUE
    other.destroy()


def test_wait_events_on_a_destroyed_queue_with_pending_events_is_invalid_queue(device):
    q, other = device.create_queue(), device.create_queue()
    gate = threading.Event()
    other.launch_host_function(gate.wait)
    pending = other.record()
    q.destroy()
    try:
        assert errc_of(q.wait_events, pending) is Errc.INVALID_QUEUE
    finally:
        gate.set()
        other.destroy()


def test_a_failed_host_function_is_reported_by_its_event_every_time_and_by_the_queue_once(device, queue):
    def fail():
        raise RuntimeError("failed on purpose")

    ev = queue.launch_host_function(fail)
    for _ in range(2):
        with pytest.raises(pyoffload.OffloadError, match="failed on purpose"):
            ev.wait()
    with pytest.raises(pyoffload.OffloadError, match="failed on purpose"):
        queue.wait()
    queue.wait()  # reported once
    after = queue.launch_host_function(lambda: None)
    after.wait()
    assert after.is_complete, "the queue stopped working after a failed host function"


def test_host_function_waiting_on_its_own_queue_is_invalid_queue(device, queue):
    seen = []

    def wait_self():
        try:
            queue.wait()
        except pyoffload.OffloadError as exc:
            seen.append(exc.errc)

    queue.launch_host_function(wait_self)
    queue.wait()
    assert seen == [Errc.INVALID_QUEUE]


def test_events_of_in_order_work_complete_in_order(device, kernels, queue):
    out = device.alloc(4)
    events = [queue.launch(kernels.kernel("bump"), 1, 1, [out]) for _ in range(10)]
    last = queue.record()
    last.wait()
    assert all(ev.is_complete for ev in events)
    assert read(out, np.int32, 1)[0] == 10
    out.free()


def test_null_handles_are_type_errors(device, queue):
    """Where liboffload answers INVALID_NULL_HANDLE / INVALID_NULL_POINTER for a missing event,
    callback or kernel, Python's ``None`` is an argument of the wrong type."""
    with pytest.raises(TypeError):
        queue.wait_events(None)
    with pytest.raises(TypeError):
        queue.launch_host_function(None)
    with pytest.raises(TypeError):
        queue.launch(None, 1, 1, [])
    with pytest.raises(TypeError):
        queue.record().elapsed_ms(None)
    assert queue.query(), "a refused call enqueued something"
