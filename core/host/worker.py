"""Host queues: an in-order worker thread per queue, so host launches are really asynchronous.

ctypes releases the GIL while a kernel runs, so work enqueued on a host queue overlaps with the
Python thread that enqueued it, as on a GPU stream.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any


class HostEvent:
    __slots__ = ("done", "error", "stamp")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.stamp = 0.0

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self.stamp = time.perf_counter()
        self.done.set()


class HostQueue:
    def __init__(self, profiling: bool) -> None:
        self.profiling = profiling
        self._ops: collections.deque[tuple[Callable[[], Any], HostEvent]] = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pyoffload-host-queue", daemon=True)
        self._thread.start()

    def submit(self, op: Callable[[], Any]) -> HostEvent:
        ev = HostEvent()
        with self._cond:
            if self._closed:
                raise RuntimeError("host queue is closed")
            self._ops.append((op, ev))
            self._pending += 1
            self._cond.notify()
        return ev

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ops and not self._closed:
                    self._cond.wait()
                if not self._ops:
                    return
                op, ev = self._ops.popleft()
            error = None
            try:
                op()
            except BaseException as exc:  # reported by synchronize / the event
                error = exc
            ev.finish(error)
            with self._cond:
                if error is not None and self._error is None:
                    self._error = error
                self._pending -= 1
                self._cond.notify_all()

    def synchronize(self) -> None:
        with self._cond:
            while self._pending:
                self._cond.wait()
            error, self._error = self._error, None
        if error is not None:
            raise error

    def idle(self) -> bool:
        with self._cond:
            return self._pending == 0

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()
