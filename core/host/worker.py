"""Host queues: an in-order worker thread per queue, so host launches really run asynchronously.
(The work-groups of a data-parallel launch run on the native runtime's threads: see
:mod:`.runtime`.)

ctypes releases the GIL while a kernel runs, so work enqueued on a host queue overlaps with the
Python thread that enqueued it, as on a GPU stream.  Submitting is a put on a C-level
``SimpleQueue``: cheap, and nothing of Python's ``threading`` module runs in the caller's thread.
Events exist only where the generic layer records one (:meth:`HostQueue.marker`).

A failure of the work (a kernel that trapped, a copy that raised) is carried by every marker the
worker reaches after it until a wait has raised it (:meth:`HostQueue.wait`,
:meth:`HostQueue.synchronize`): the generic layer records it there and reports it, and the queue
keeps working.
"""

from __future__ import annotations

import queue as _queue
import threading
from _thread import allocate_lock
import time
from collections.abc import Callable
from typing import Any


class HostEvent:
    """A marker: reached when the worker reaches it, with the time it did and the failure of the
    work before it that no wait had raised yet; ``created`` is when it was recorded
    (``perf_counter``, as ``stamp``: Event.profiling_info's times).

    It is a lock, held from its creation until the worker releases it: waiting is acquiring it
    and releasing it again for the next waiter, each one C call that blocks without the GIL.  A
    ``threading.Event`` costs a Condition, a waiter lock per wait and Python code on both sides,
    a few microseconds of every synchronous launch's round trip."""

    __slots__ = ("_lock", "error", "stamp", "created", "queue")

    def __init__(self, queue: HostQueue) -> None:
        self._lock = allocate_lock()
        self._lock.acquire()
        self.error: BaseException | None = None
        self.stamp = 0.0
        self.created = time.perf_counter()
        self.queue = queue

    def reach(self) -> None:
        """The worker reached this marker (called once, by the worker)."""
        self._lock.release()

    def is_set(self) -> bool:
        return not self._lock.locked()

    def wait(self) -> None:
        lock = self._lock
        lock.acquire()
        lock.release()


_STOP = object()


class HostQueue:
    def __init__(self, profiling: bool) -> None:
        self.profiling = profiling
        self._items: _queue.SimpleQueue[Any] = _queue.SimpleQueue()
        self.submitted = 0
        self.completed = 0
        self._count = threading.Lock()
        self.error: BaseException | None = None  # the first failure of this queue's work no wait raised yet
        self._thread = threading.Thread(target=self._run, name="pyoffload-host-queue", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> None:
        with self._count:
            self.submitted += 1
            self._items.put((fn, args))

    def marker(self) -> HostEvent:
        """An event the worker sets when it reaches it.  ``synchronize`` records one without the
        generic layer's queue lock, so the count and the order are kept under a lock of ours."""
        event = HostEvent(self)
        with self._count:
            self.submitted += 1
            self._items.put(event)
        return event

    def _run(self) -> None:
        get = self._items.get
        while True:
            item = get()
            if item is _STOP:
                return
            if type(item) is HostEvent:
                item.stamp = time.perf_counter()
                item.error = self.error
                item.reach()
            else:
                try:
                    item[0](*item[1])
                except BaseException as exc:  # carried by later markers until a wait raises it
                    with self._count:
                        if self.error is None:
                            self.error = exc
            self.completed += 1

    def reported(self, error: BaseException) -> None:
        """A wait raised ``error``: markers the worker reaches from now on do not carry it."""
        with self._count:
            if self.error is error:
                self.error = None

    def wait(self, event: HostEvent) -> None:
        event.wait()
        error = event.error
        if error is not None:
            self.reported(error)
            raise error

    def synchronize(self) -> None:
        """Wait for everything submitted before this call (not for what others submit meanwhile)."""
        if self.completed != self.submitted:
            self.wait(self.marker())
            return
        with self._count:
            error, self.error = self.error, None
        if error is not None:
            raise error

    def idle(self) -> bool:
        return self.completed == self.submitted

    def close(self) -> None:
        self._items.put(_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join()
