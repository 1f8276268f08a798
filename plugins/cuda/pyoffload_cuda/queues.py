"""Streams, events and host functions.

pycuda exposes neither ``cuLaunchHostFunc`` nor ``cuStreamWaitValue32``, so nothing can make a
CUDA stream wait for host code.  Host functions are therefore emulated on the host side: once a
host function is enqueued, the queue switches to a *backlog*: later operations are not given to
the stream yet but appended to a list that a worker thread works through in order: for a host
function it waits for an event recorded after the earlier work, runs the function, and goes on;
for an operation it submits it to the stream.  When the backlog is empty the queue goes back to
submitting directly.  Enqueueing never blocks, and later work really waits for the host function.

Every operation returns a :class:`QueueEvent`: it becomes "submitted" when its work reaches the
stream (at once, outside a backlog), and complete when the CUDA event recorded after it is.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from .binding import errors
from .devices import CudaDevice


class QueueEvent:
    """An operation's completion: a CUDA event once submitted, or a host function's run."""

    def __init__(self, device: CudaDevice, timing: bool) -> None:
        self.device = device
        self.timing = timing
        self.cuda_event: Any = None
        self.host_function = False
        self.error: BaseException | None = None
        self._submitted = threading.Event()
        device.handles.add(self)

    def _resolve(self, cuda_event: Any) -> None:
        self.cuda_event = cuda_event
        self._submitted.set()

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        self._submitted.set()

    def wait(self) -> None:
        self._submitted.wait()
        if self.error is not None:
            raise self.error
        ev = self.cuda_event
        if ev is not None:
            with self.device.current(), errors(self.device.cuda, "waiting for a CUDA event"):
                ev.synchronize()

    def query(self) -> bool:
        if not self._submitted.is_set():
            return False
        ev = self.cuda_event
        if ev is None or self.error is not None:
            return True
        with self.device.current(), errors(self.device.cuda, "querying a CUDA event"):
            return bool(ev.query())

    def release(self) -> None:
        # pycuda destroys the event when the last reference goes; an incomplete event may be
        # destroyed (the driver releases it once it completes).
        self.cuda_event = None


class CudaQueue:
    """An in-order queue: a pycuda ``Stream`` plus the host-function backlog."""

    def __init__(self, device: CudaDevice, profiling: bool) -> None:
        cuda = device.cuda
        self.device = device
        self.profiling = profiling
        self._event_flags = 0 if profiling else int(cuda.event_flags.DISABLE_TIMING)
        with device.current(), errors(cuda, "creating a CUDA stream"):
            self.stream: Any = cuda.Stream()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._backlog: collections.deque[tuple[Any, ...]] = collections.deque()
        self._running = False  # a worker thread owns the backlog
        self._errors: list[BaseException] = []
        device.handles.add(self)

    # -- submission ---------------------------------------------------------------------------

    def _record(self) -> Any:
        ev = self.device.cuda.Event(self._event_flags)
        ev.record(self.stream)
        return ev

    def _submit_now(self, op: Callable[[Any], None], ev: QueueEvent) -> None:
        with self.device.current(), errors(self.device.cuda, "enqueueing on a CUDA stream"):
            op(self.stream)
            ev._resolve(self._record())

    def submit(self, op: Callable[[Any], None]) -> QueueEvent:
        """Enqueue ``op(stream)`` (which issues asynchronous driver calls on ``stream``)."""
        ev = QueueEvent(self.device, self.profiling)
        with self._lock:
            if self._running:
                self._backlog.append(("op", op, ev))
                return ev
            self._submit_now(op, ev)  # under the lock: keeps order with a host function
        return ev

    def host_function(self, fn: Callable[[], None]) -> QueueEvent:
        ev = QueueEvent(self.device, False)
        ev.host_function = True
        with self._lock:
            marker = None
            if not self._running:
                with self.device.current(), errors(self.device.cuda, "recording a CUDA event"):
                    marker = self.device.cuda.Event(int(self.device.cuda.event_flags.DISABLE_TIMING))
                    marker.record(self.stream)
            self._backlog.append(("host", fn, ev, marker))
            if not self._running:
                self._running = True
                threading.Thread(target=self._work, name="pyoffload-cuda-queue", daemon=True).start()
        return ev

    def _work(self) -> None:
        cuda = self.device.cuda
        while True:
            with self._lock:
                if not self._backlog:
                    self._running = False
                    self._idle.notify_all()
                    return
                item = self._backlog.popleft()
                if item[0] == "op":
                    # Submit under the lock so that direct submissions cannot overtake it.
                    try:
                        self._submit_now(item[1], item[2])
                    except BaseException as exc:
                        item[2]._fail(exc)
                        self._errors.append(exc)
                    continue
            _, fn, ev, marker = item
            try:
                with self.device.current(), errors(cuda, "waiting for work before a host function"):
                    if marker is None:
                        marker = cuda.Event(int(cuda.event_flags.DISABLE_TIMING))
                        marker.record(self.stream)
                    marker.synchronize()
                del marker
                fn()
                ev._resolve(None)
            except BaseException as exc:
                ev._fail(exc)
                self._errors.append(exc)

    # -- synchronisation ----------------------------------------------------------------------

    def synchronize(self) -> None:
        with self._lock:
            while self._running:
                self._idle.wait()
            errs, self._errors = self._errors, []
        with self.device.current(), errors(self.device.cuda, "synchronising a CUDA stream"):
            self.stream.synchronize()
        if errs:
            raise errs[0]

    def query(self) -> bool:
        with self._lock:
            if self._running:
                return False
        with self.device.current(), errors(self.device.cuda, "querying a CUDA stream"):
            return bool(self.stream.is_done())

    def release(self) -> None:
        with self._lock:
            while self._running:
                self._idle.wait()
        self.stream = None
