"""A launch's hand-over to its queue (``QueueCore.enqueue_launch``, used by ``Queue.launch`` and
the call of a ``PreparedLaunch``).

The rules: users recorded before the liveness checks, the queue's lock
released on every path (errors included), a backend exception that is not an ``OffloadError``
worded by the dispatcher and chained, the backlog keeping the queue's order, a profiling queue's
events carrying timestamps, and enqueues from many threads each getting one sequence number.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import pyoffload
from pyoffload import BackendError, Errc, InvalidArgumentError, OffloadError

SOURCE = """
#include <stdint.h>
void noop(void) {}
void add_one(int32_t *out) { out[0] += 1; }
"""


@pytest.fixture
def prog(host: Any) -> Iterator[Any]:
    p = host.build_program(SOURCE)
    yield p
    if p.loaded:
        p.unload()


@pytest.fixture
def queue(host: Any) -> Iterator[Any]:
    q = host.create_queue()
    yield q
    if q.live:
        q.destroy()


def test_a_prepared_launch_returns_its_event(queue: Any, prog: Any) -> None:
    launch = queue.prepare(prog.kernel("noop"), 1, 1)
    ev = launch()
    assert type(ev) is pyoffload.Event and ev.queue is queue and ev.seq == queue.seq
    assert launch.launch().seq == ev.seq + 1
    ev.wait()
    assert ev.is_complete


def test_fields_deleted_from_python_raise_instead_of_crashing(host: Any, prog: Any) -> None:
    """Issue 22, finding 10: ``del queue.submitted`` crashed the C hand-over."""
    q = host.create_queue()
    launch = q.prepare(prog.kernel("noop"), 1, 1)
    # Compiled, the counters are C fields and the del itself refuses; interpreted, a launch
    # stores the field again and a wait raises AttributeError.  Never a crash.
    try:
        del q.submitted
    except (AttributeError, NotImplementedError, TypeError):
        pass
    q.launch(prog.kernel("noop"), 1, 1)
    assert not q._lock.locked() and q.submitted == q.seq
    try:
        del q.done
    except (AttributeError, NotImplementedError, TypeError):
        pass
    else:
        with pytest.raises(AttributeError):
            q.wait()
    assert not q._lock.locked()
    q.done = 0
    ev = launch()
    try:
        del ev.marker  # compiled, an Event's fields are read-only: the del itself refuses
    except AttributeError:
        pass
    else:
        with pytest.raises(AttributeError):
            ev.elapsed_ms(ev)
    ev.wait()  # either way the event still works
    try:
        del launch._checked  # compiled, a C field Python cannot reach: the del itself refuses
    except AttributeError:
        pass
    else:
        with pytest.raises(AttributeError):
            launch()
    q.wait()
    q.destroy()


def test_a_launch_records_its_users_before_it_returns(host: Any, queue: Any, prog: Any) -> None:
    a = host.alloc(4)
    pyoffload.memcpy(a, np.zeros(1, np.int32))
    launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
    ev = launch()
    assert a.users[queue] == ev.seq and queue.last_launch_of(prog) == ev.seq
    ev2 = queue.launch(prog.kernel("add_one"), 1, 1, [a])
    assert ev2.seq == ev.seq + 1 and a.users[queue] == ev2.seq
    queue.wait()
    out = np.zeros(1, np.int32)
    pyoffload.memcpy(out, a)
    assert out[0] == 2
    a.free()


def test_errors_leave_the_lock_free(host: Any, queue: Any, prog: Any) -> None:
    a = host.alloc(4)
    launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
    a.free()
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="was freed"):
            launch()
        assert not queue._lock.locked()
    with pytest.raises(InvalidArgumentError, match="not in a live allocation"):
        launch(1)  # new values: a pointer into no allocation
    with pytest.raises(InvalidArgumentError, match="was freed"):
        launch(a)
    assert not queue._lock.locked()
    # the queue still works, and no sequence number was spent on the refused launches
    before = queue.seq
    queue.launch(prog.kernel("noop"), 1, 1).wait()
    assert queue.seq == before + 1


def test_a_foreign_exception_is_worded_and_chained(queue: Any, prog: Any) -> None:
    def boom() -> None:
        raise ValueError("the vendor said no")

    with pytest.raises(BackendError) as err:
        queue.enqueue_launch(prog, (), boom, ())
    assert isinstance(err.value.__cause__, ValueError) and "the vendor said no" in str(err.value)
    assert err.value.__cause__.__traceback__ is not None
    assert not queue._lock.locked()

    def refuse() -> None:
        raise InvalidArgumentError("refused as it is")

    with pytest.raises(InvalidArgumentError, match="refused as it is") as err2:
        queue.enqueue_launch(prog, [], refuse, ())
    assert err2.value.__cause__ is None
    with pytest.raises(TypeError):
        queue.enqueue_launch(prog, (), refuse)  # type: ignore[call-arg]
    assert not queue._lock.locked()


def test_destroyed_queue_and_unloaded_program(host: Any, prog: Any) -> None:
    q = host.create_queue()
    launch = q.prepare(prog.kernel("noop"), 1, 1)
    q.destroy()
    with pytest.raises(OffloadError) as err:
        q.enqueue_launch(prog, (), lambda: None, ())
    assert err.value.errc is Errc.INVALID_QUEUE and str(err.value) == str(q.dead())
    with pytest.raises(OffloadError) as err:
        launch()
    assert err.value.errc is Errc.INVALID_QUEUE
    q2 = host.create_queue()
    called: list[int] = []
    prog.unload()
    with pytest.raises(OffloadError) as err:
        q2.enqueue_launch(prog, (), lambda: called.append(1), ())
    assert err.value.errc is Errc.INVALID_PROGRAM and not called
    q2.destroy()


def test_profiling_events_have_timestamps(host: Any, prog: Any) -> None:
    q = host.create_queue(profiling=True)
    launch = q.prepare(prog.kernel("noop"), 1, 1)
    first, second = launch(), q.launch(prog.kernel("noop"), 1, 1)
    assert first.marker is not None and second.marker is not None
    assert second.elapsed_ms(first) >= 0.0
    q.destroy()


def test_the_backlog_keeps_the_order(host: Any, queue: Any, prog: Any) -> None:
    a = host.alloc(4)
    pyoffload.memcpy(a, np.zeros(1, np.int32))
    gate = threading.Event()
    seen: list[int] = []

    def read() -> None:
        out = np.zeros(1, np.int32)
        pyoffload.memcpy(out, a)
        seen.append(int(out[0]))

    queue._native_host_functions = False  # as a backend without them: the queue keeps a backlog
    queue.launch_host_function(gate.wait)  # ... until the gate opens
    try:
        launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
        events = [launch() for _ in range(3)]
        queue.launch_host_function(read)
        assert queue.backlog is not None and not any(ev.is_complete for ev in events)
    finally:
        gate.set()
    queue.wait()
    assert seen == [3] and [ev.seq for ev in events] == list(range(events[0].seq, events[0].seq + 3))
    a.free()


def test_threads_each_get_one_sequence_number(host: Any, queue: Any, prog: Any) -> None:
    a = host.alloc(4)
    pyoffload.memcpy(a, np.zeros(1, np.int32))
    launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
    kernel = prog.kernel("add_one")
    per_thread, threads = 200, 4
    seqs: list[list[int]] = [[] for _ in range(threads)]
    start = queue.seq

    def work(i: int) -> None:
        for j in range(per_thread):
            ev = launch() if j % 2 else queue.launch(kernel, 1, 1, [a])
            seqs[i].append(ev.seq)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    queue.wait()
    every = sorted(s for part in seqs for s in part)
    assert every == list(range(start + 1, start + 1 + threads * per_thread))
    assert all(part == sorted(part) for part in seqs)  # each thread's launches in its order
    out = np.zeros(1, np.int32)
    pyoffload.memcpy(out, a)
    assert out[0] == threads * per_thread
    assert queue.submitted == queue.seq and not queue._lock.locked()
    a.free()


def test_a_refused_launch_on_a_profiling_queue_releases_the_events_it_recorded(fresh_runtime: Any) -> None:
    # A profiling queue records an event before each operation (its start): when the backend
    # refuses the operation, that event is released like any other, not kept for an owner.
    from faults import FaultPlugin, install

    from pyoffload import runtime
    from pyoffload.hooks.wrappers import wrap_every_hook

    @wrap_every_hook
    class Count:
        def __init__(self) -> None:
            self.live: set[int] = set()

        def around(self, hook: str, kwargs: dict[str, Any]) -> Any:
            result = yield
            if hook == "event_record_impl":
                self.live.add(id(result))
            elif hook == "event_release_impl":
                self.live.discard(id(kwargs["event"]))
            return result

    counter = Count()

    def counting(backend: str) -> Any:
        return counter

    runtime.add_wrapper(counting)
    fault = install(FaultPlugin("launch_impl"))
    try:
        dev = pyoffload.host_device()
        p = dev.build_program(SOURCE)
        q = dev.create_queue(profiling=True)
        with pytest.raises(OffloadError):
            q.launch(p.kernel("noop"), 1, 1, [])
        ev = q.launch(p.kernel("noop"), 1, 1, [])  # the next launch runs and is timed
        assert ev.profiling_info("ended") >= ev.profiling_info("started")
        del ev
        q.destroy()
        assert not counter.live
        p.unload()
    finally:
        runtime.remove_wrapper(fault)
        runtime.remove_wrapper(counting)


def _read(a: Any) -> int:
    out = np.zeros(1, np.int32)
    pyoffload.memcpy(out, a)
    return int(out[0])


def test_new_values_and_prepared_values_interleave(host: Any, queue: Any, prog: Any) -> None:
    """The backend's prepared function takes new values itself: calls without values keep using
    the prepared ones, whatever came between."""
    a, b = host.alloc(4), host.alloc(4)
    for x in (a, b):
        pyoffload.memcpy(x, np.zeros(1, np.int32))
    launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
    for _ in range(3):
        launch()
        launch(b)
        launch(b)
    launch(a)
    queue.wait()
    assert (_read(a), _read(b)) == (4, 6)
    a.free()
    b.free()


def test_a_wrapper_sees_launches_with_new_values(host: Any, queue: Any, prog: Any) -> None:
    from faults import FaultPlugin, install

    from pyoffload import runtime

    a, b = host.alloc(4), host.alloc(4)
    for x in (a, b):
        pyoffload.memcpy(x, np.zeros(1, np.int32))
    launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
    plugin = FaultPlugin("launch_impl", nth=2)
    factory = install(plugin)
    try:
        launch(b)
        with pytest.raises(BackendError, match="injected fault"):
            launch(b)
        launch()
        assert plugin.calls == 3 and plugin.fired == 1
    finally:
        runtime.remove_wrapper(factory)
    launch(b)  # no wrapper: the backend's prepared function again
    queue.wait()
    assert (_read(a), _read(b)) == (1, 2)
    a.free()
    b.free()


def test_a_prepared_function_without_parameters_gets_new_values_through_launch_impl(
    host: Any, queue: Any, prog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend written for the zero-argument form of launch_prepare_impl keeps working."""
    made = host.disp.raw.launch_prepare_impl
    called: list[int] = []

    def zero_argument_form(*a: Any) -> Any:
        fn = made(*a)

        def launch(keep: Any = fn) -> None:  # a default that keeps something alive is no new_args
            called.append(1)
            keep()

        return launch

    monkeypatch.setattr(host.disp.raw, "launch_prepare_impl", zero_argument_form)
    monkeypatch.setattr(host.disp, "launch_prepare_impl", zero_argument_form)
    a, b = host.alloc(4), host.alloc(4)
    for x in (a, b):
        pyoffload.memcpy(x, np.zeros(1, np.int32))
    launch = queue.prepare(prog.kernel("add_one"), 1, 1, [a])
    launch(b)
    launch()
    queue.wait()
    assert (_read(a), _read(b), len(called)) == (1, 1, 1)
    a.free()
    b.free()
