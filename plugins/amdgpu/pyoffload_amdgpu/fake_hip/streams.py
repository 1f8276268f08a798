"""Fake streams and events: work runs in order on a worker thread per stream, as on a GPU queue.

Enqueueing returns at once; the worker executes each operation in turn, so ``hipStreamQuery``
really is "not ready" while a long kernel runs, host functions run on a thread that is not the
caller's, and an event completes when the worker passes it.  A fault inside an operation (an
illegal address in a kernel) becomes the stream's sticky error, returned by the next
synchronisation, as a real asynchronous fault is.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from .memory import Fault

Operation = Callable[[], None]


class FakeStream:
    def __init__(self, device: int, flags: int, on_fault: Callable[[Fault], None], label: str) -> None:
        self.device = device
        self.flags = flags
        self.label = label
        self.destroyed = False
        self.error = 0
        self._on_fault = on_fault
        self._ops: queue.Queue[Operation | None] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition()
        self._worker = threading.Thread(target=self._run, name=f"fake-hip-{label}", daemon=True)
        self._worker.start()

    def __repr__(self) -> str:
        return f"<FakeStream {self.label} device={self.device}>"

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
                    self._pending -= 1
                    self._idle.notify_all()

    def enqueue(self, op: Operation) -> None:
        with self._idle:
            self._pending += 1
        self._ops.put(op)

    def busy(self) -> bool:
        with self._idle:
            return self._pending > 0

    def wait(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)

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
        self._done = threading.Event()
        self._done.set()  # an event never recorded counts as complete

    def __repr__(self) -> str:
        return f"<FakeEvent {self.label} device={self.device}>"

    @property
    def timing(self) -> bool:
        return not self.flags & 2  # hipEventDisableTiming

    def arm(self) -> Operation:
        """Prepare for a record; return the operation that completes the event."""
        self.recorded = True
        self.timestamp = None
        self._done.clear()
        done = self._done

        def complete() -> None:
            self.timestamp = time.perf_counter()
            done.set()

        return complete

    def complete(self) -> bool:
        return self._done.is_set()

    def wait(self) -> None:
        self._done.wait()
