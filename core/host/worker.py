"""Host queues: an in-order worker thread per queue, so host launches really run asynchronously;
and the pool of threads that runs the chunks of data-parallel launches.

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

import _thread
import queue as _queue
import threading
import time
from collections.abc import Callable
from typing import Any


class HostEvent:
    """A marker: set when the worker reaches it, with the time it did and the failure of the work
    before it that no wait had raised yet."""

    __slots__ = ("done", "error", "stamp", "queue")

    def __init__(self, queue: HostQueue) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.stamp = 0.0
        self.queue = queue


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
                item.done.set()
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
        event.done.wait()
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


class ChunkPool:
    """Threads that run chunks of data-parallel launches for every host queue.

    A queue's worker hands all chunks of a launch but one to the pool, runs that one itself and
    waits for the rest (:meth:`run`), so launches keep their queue's order.  Chunk functions are
    ctypes calls (the GIL is released while they run) and never raise; the threads start with the
    first launch that has more than one chunk.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._tasks: _queue.SimpleQueue[Any] = _queue.SimpleQueue()
        self._started: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            while len(self._started) < self.threads - 1:
                t = threading.Thread(target=self._serve, name="pyoffload-host-chunks", daemon=True)
                t.start()
                self._started.append(t)

    def _serve(self) -> None:
        get = self._tasks.get
        while True:
            task = get()
            if task is _STOP:
                return
            fn, args, finished = task
            try:
                fn(*args)
            finally:
                finished.release()

    def run(self, fn: Callable[..., Any], chunks: list[tuple[Any, ...]]) -> None:
        """Call ``fn(*args)`` for every ``args`` in ``chunks``, in parallel; return when all have."""
        if len(self._started) < self.threads - 1:
            self._start()
        waits = []
        put = self._tasks.put
        for args in chunks[1:]:
            finished = _thread.allocate_lock()
            finished.acquire()
            put((fn, args, finished))
            waits.append(finished)
        try:
            fn(*chunks[0])
        finally:
            for finished in waits:
                finished.acquire()

    def close(self) -> None:
        with self._start_lock:
            for _ in self._started:
                self._tasks.put(_STOP)
            for t in self._started:
                t.join()
            self._started.clear()
