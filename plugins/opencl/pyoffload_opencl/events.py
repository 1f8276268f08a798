"""Events, host functions and profiling.

A host function is three commands' worth of ordering built from standard OpenCL:

1. a marker on the queue completes when all earlier work has;
2. a ``cl.UserEvent`` stands for the host function itself;
3. a barrier waiting on the user event holds back all later work on the queue.

A helper thread waits for the marker, runs the function, then completes the user event.  The
barrier's event is the host function's event.  The function runs on a thread of ours, never on a
driver callback thread, so it may call back into OpenCL (even wait on other queues).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyoffload.backend import BackendError, UnsupportedError

from .handles import OclQueue


@dataclass(eq=False)
class HostFunctionEvent:
    """The event of a host function: its barrier, plus the function's outcome."""

    barrier: Any  # cl.Event
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def enqueue_host_function(queue: OclQueue, fn: Callable[[], None]) -> HostFunctionEvent:
    import pyopencl as cl

    cl_queue = queue.cl_queue
    user = cl.UserEvent(queue.context.cl_context)
    marker = cl.enqueue_marker(cl_queue)
    try:
        barrier = cl.enqueue_barrier(cl_queue, wait_for=[user])
    except BaseException:
        user.set_status(cl.command_execution_status.COMPLETE)
        raise
    handle = HostFunctionEvent(barrier)

    def run() -> None:
        try:
            marker.wait()
            fn()
        except BaseException as exc:  # reported by the next wait/synchronize, not lost
            handle.error = exc
            queue.host_errors.append(exc)
        finally:
            handle.done.set()
            user.set_status(cl.command_execution_status.COMPLETE)

    queue.last_event = handle  # before the thread starts: fn may look at its own queue
    threading.Thread(target=run, name="pyoffload-opencl-host-fn", daemon=True).start()
    return handle


def _raise_host_error(exc: BaseException) -> None:
    raise BackendError(f"host function failed: {exc!r}") from exc


def wait(event: Any) -> None:
    if isinstance(event, HostFunctionEvent):
        event.barrier.wait()
        event.done.wait()
        if event.error is not None:
            _raise_host_error(event.error)
        return
    event.wait()


def query(event: Any) -> bool:
    import pyopencl as cl

    if isinstance(event, HostFunctionEvent):
        if not event.done.is_set():
            return False
        event = event.barrier
    status = int(event.command_execution_status)
    if status < 0:
        raise BackendError(f"the command failed with OpenCL status {status}")
    return status == cl.command_execution_status.COMPLETE


def synchronize(queue: OclQueue) -> None:
    event = queue.last_event
    queue.cl_queue.finish()
    if isinstance(event, HostFunctionEvent):
        event.done.wait()  # the barrier completes a moment before the helper thread returns
    if queue.last_event is event:
        queue.last_event = None
    if queue.host_errors:
        exc = queue.host_errors.pop(0)
        queue.host_errors.clear()
        _raise_host_error(exc)


def queue_idle(queue: OclQueue) -> bool:
    """Non-blocking: is everything enqueued so far complete?  On an in-order queue, exactly
    when its newest command is.  (A fresh marker would not do: it is itself still pending.)"""
    event = queue.last_event
    if event is None:
        return True
    queue.cl_queue.flush()
    done = query(event)
    if done and queue.last_event is event:
        queue.last_event = None  # let the cl.Event go
    return done


def elapsed_ms(start: Any, end: Any) -> float:
    """From the start of the command ``start`` marks to the end of the one ``end`` marks (the
    same event gives that command's duration), in milliseconds."""
    import pyopencl as cl

    if isinstance(start, HostFunctionEvent):
        start = start.barrier
    if isinstance(end, HostFunctionEvent):
        end = end.barrier
    try:
        t0 = int(start.profile.start)
        t1 = int(end.profile.end)
    except cl.Error as exc:
        raise UnsupportedError(
            f"no profiling information for these events (queue created without profiling?): {exc}"
        ) from exc
    return (t1 - t0) / 1e6
