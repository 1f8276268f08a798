"""Fake streams and events: work runs in order on a worker thread per stream, as on a GPU queue.

Enqueueing returns at once; the worker executes each operation in turn, so ``hipStreamQuery``
really is "not ready" while a long kernel runs, host functions run on a thread that is not the
caller's, and an event completes when the worker passes it.  ``hipStreamSynchronize`` waits for
the work enqueued before it, not for what other threads enqueue meanwhile.  A fault inside an
operation (an illegal address in a kernel) becomes the stream's sticky error, returned by the
next synchronisation and by every event recorded after it, as a real asynchronous fault is.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from .memory import Fault

Operation = Callable[[], None]


class Latch:
    """Set once; any number of threads wait for it.  Built on a bare lock so that recording and
    waiting enter no Python frame of ``threading`` (the frame budgets count the caller's frames,
    and the real driver is C)."""

    __slots__ = ("_lock",)

    def __init__(self, done: bool = False) -> None:
        self._lock = threading.Lock()
        if not done:
            self._lock.acquire()

    def set(self) -> None:
        self._lock.release()

    def is_set(self) -> bool:
        return not self._lock.locked()

    def wait(self) -> None:
        self._lock.acquire()  # returns once set; hand the lock on to the next waiter
        self._lock.release()


class FakeStream:
    def __init__(self, device: int, flags: int, on_fault: Callable[[Fault], None], label: str, address: int) -> None:
        self.device = device
        self.address = address  # what int() of the handle gives, as with hip-python's hipStream_t
        self.flags = flags
        self.label = label
        self.destroyed = False
        self.error = 0  # sticky: the first fault, until a synchronisation takes it
        self._on_fault = on_fault
        self._ops: queue.SimpleQueue[Operation | None] = queue.SimpleQueue()
        self._enqueued = 0
        self._completed = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._worker = threading.Thread(target=self._run, name=f"fake-hip-{label}", daemon=True)
        self._worker.start()

    def __repr__(self) -> str:
        return f"<FakeStream {self.label} device={self.device}>"

    def __int__(self) -> int:
        return self.address

    def _run(self) -> None:
        while True:
            op = self._ops.get()
            if op is None:
                return
            try:
                op()
            except Fault as fault:
                self.error = self.error or fault.err
                self._on_fault(fault)
            except BaseException as exc:  # a bug in an emulation: still a failed operation
                self.error = self.error or 719
                self._on_fault(Fault(719, f"{self.label}: operation raised {exc!r}"))
            finally:
                with self._idle:
                    self._completed += 1
                    self._idle.notify_all()

    def enqueue(self, op: Operation) -> None:
        with self._lock:
            self._enqueued += 1
            self._ops.put(op)

    def busy(self) -> bool:
        with self._lock:
            return self._completed < self._enqueued

    def wait(self) -> None:
        """Wait for the work enqueued so far (work enqueued meanwhile may still run)."""
        with self._idle:
            upto = self._enqueued
            self._idle.wait_for(lambda: self._completed >= upto)

    def take_error(self) -> int:
        err, self.error = self.error, 0
        return err

    def stop(self) -> None:
        self.wait()
        self._ops.put(None)
        self._worker.join()
        self.destroyed = True


class FakeEvent:
    def __init__(self, device: int, flags: int, label: str) -> None:
        self.device = device
        self.flags = flags
        self.label = label
        self.destroyed = False
        self.recorded = False
        self.timestamp: float | None = None
        self.error = 0  # the stream's sticky error when the event completed
        self._done = Latch(done=True)  # an event never recorded counts as complete

    def __repr__(self) -> str:
        return f"<FakeEvent {self.label} device={self.device}>"

    @property
    def timing(self) -> bool:
        return not self.flags & 2  # hipEventDisableTiming

    def arm(self, stream: FakeStream | None) -> Operation:
        """Prepare for a record on ``stream``; return the operation that completes the event.

        Each record gets a completion of its own: a stream told to wait for the event
        (``hipStreamWaitEvent``) waits for the record current at that call, as in HIP.
        """
        self.recorded = True
        self.timestamp = None
        self.error = 0
        done = self._done = Latch()

        def complete() -> None:
            self.timestamp = time.perf_counter()
            self.error = stream.error if stream is not None else 0
            done.set()

        return complete

    def completion(self) -> Latch:
        """The completion of the latest record."""
        return self._done

    def complete(self) -> bool:
        return self._done.is_set()

    def wait(self) -> None:
        self._done.wait()
