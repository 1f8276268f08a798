"""Shared virtual memory: allocations whose addresses are real device pointers.

Every allocation is a ``cl.SVMAllocation``; its ``svm_ptr`` is the address pyoffload hands out.
pyopencl only accepts :class:`pyopencl.SVMPointer` objects where OpenCL takes an SVM pointer,
so a raw address (possibly pointing inside an allocation) is wrapped as ``cl.SVM`` over a ctypes
array placed at that address: the wrapper never touches the memory, it only carries the address
and a size that pyopencl checks copy sizes against.

The :class:`SvmRegistry` maps base addresses back to the allocation object (to free it) and to
its context (the hooks that take only a device and a pointer need the context's queue).
"""

from __future__ import annotations

import bisect
import ctypes
import queue as _queue
import threading
from dataclasses import dataclass
from typing import Any

from pyoffload.backend import AllocKind, OutOfResourcesError, UnsupportedError

from .handles import SVM_COARSE_GRAIN_BUFFER, SVM_FINE_GRAIN_BUFFER, OclContext, OclDevice

_C1 = ctypes.c_char * 1


def svm_ref(ptr: int, size: int = 1) -> Any:
    """A ``cl.SVM`` naming ``size`` bytes at address ``ptr`` (no access to the memory)."""
    import pyopencl as cl

    return cl.SVM((ctypes.c_char * size).from_address(ptr))


def svm_arg(ptr: int) -> Any:
    """A ``cl.SVM`` for a kernel pointer argument: only the address matters there."""
    import pyopencl as cl

    return cl.SVM(_C1.from_address(ptr))


def host_ref(view: memoryview, size: int) -> Any:
    """A ``cl.SVM`` over a host buffer, read-only ones included (``cl.SVM`` itself insists on
    a writable buffer).  The caller keeps ``view`` alive while the command uses it."""
    import numpy as np

    addr = np.frombuffer(view, dtype=np.uint8, count=size).ctypes.data
    return svm_ref(addr, size)


@dataclass(eq=False)
class SvmRecord:
    base: int
    size: int
    allocation: Any  # cl.SVMAllocation
    context: OclContext
    kind: AllocKind


class SvmRegistry:
    """Every live SVM allocation of this backend, keyed by base address."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._records: dict[int, SvmRecord] = {}
        self._lock = threading.Lock()

    def add(self, record: SvmRecord) -> None:
        with self._lock:
            bisect.insort(self._bases, record.base)
            self._records[record.base] = record

    def pop(self, base: int) -> SvmRecord:
        with self._lock:
            record = self._records.pop(base)
            del self._bases[bisect.bisect_left(self._bases, base)]
            return record

    def find(self, ptr: int) -> SvmRecord | None:
        """The allocation containing ``ptr`` (interior pointers included), or None."""
        with self._lock:
            i = bisect.bisect_right(self._bases, ptr) - 1
            if i < 0:
                return None
            record = self._records[self._bases[i]]
        return record if ptr < record.base + record.size else None

    def context_of(self, ptr: int) -> OclContext | None:
        record = self.find(ptr)
        return record.context if record is not None else None

    def records_of(self, context: OclContext) -> list[SvmRecord]:
        with self._lock:
            return [r for r in self._records.values() if r.context is context]

    def clear(self) -> None:
        with self._lock:
            self._bases.clear()
            self._records.clear()


REGISTRY = SvmRegistry()


def required_caps(kind: AllocKind) -> int:
    """DEVICE memory is coarse-grain SVM (host access only through copies, as on a GPU);
    HOST and MANAGED are fine-grain buffer SVM, which the host reads and writes in place."""
    return SVM_COARSE_GRAIN_BUFFER if kind is AllocKind.DEVICE else SVM_FINE_GRAIN_BUFFER


def allocate(context: OclContext, device: OclDevice | None, size: int, kind: AllocKind) -> int:
    import pyopencl as cl

    need = required_caps(kind)
    devices = (device,) if device is not None else context.devices
    for dev in devices:
        if not dev.svm_caps & need:
            what = "coarse-grain" if need == SVM_COARSE_GRAIN_BUFFER else "fine-grain buffer"
            raise UnsupportedError(
                f"{kind.name} memory needs {what} shared virtual memory, which OpenCL device "
                f"{dev.name!r} does not support (CL_DEVICE_SVM_CAPABILITIES={dev.svm_caps:#x})"
            )
    flags = cl.svm_mem_flags.READ_WRITE
    if kind is not AllocKind.DEVICE:
        flags |= cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
    max_alloc = min(d.max_alloc for d in devices)
    if size > max_alloc:
        raise OutOfResourcesError(
            f"{size} bytes exceeds the device's largest allocation ({max_alloc} bytes)"
        )
    try:
        allocation = cl.SVMAllocation(context.cl_context, size, 0, flags)
    except (cl.MemoryError, cl.RuntimeError, cl.LogicError) as exc:
        # clSVMAlloc reports failure only as NULL; pyopencl turns that into an error here.
        raise OutOfResourcesError(f"clSVMAlloc of {size} bytes failed: {exc}") from exc
    ptr = int(allocation.svm_ptr)
    if ptr == 0:
        raise OutOfResourcesError(f"clSVMAlloc of {size} bytes returned NULL")
    REGISTRY.add(SvmRecord(ptr, size, allocation, context, kind))
    return ptr


def release(context: OclContext, ptr: int) -> None:
    """Free the allocation at ``ptr`` once nothing in its context can still be using it.

    clSVMFree does not wait for commands that use the memory.  The generic layer already waits
    for the queues it saw use the allocation; any other queue of the context with unfinished
    work gets a deferred free: a helper thread waits for that work, then frees.  Never blocking
    here means a host function may free memory without waiting on its own queue (a deadlock).
    """
    record = REGISTRY.pop(ptr)
    pending = _pending_work(context)
    if pending:
        _REAPER.defer(record.allocation, pending)
    else:
        record.allocation.release()


def _pending_work(context: OclContext) -> list[Any]:
    from .events import query

    pending = []
    for oq in list(context.queues):
        event = oq.last_event
        if event is None:
            continue
        try:
            done = query(event)
        except Exception:
            done = True  # a failed command is finished too
        if not done:
            pending.append(event)
    return pending


class _Reaper:
    """One daemon thread that frees SVM once the work that may still use it has finished."""

    def __init__(self) -> None:
        self._jobs: _queue.SimpleQueue[tuple[Any, list[Any]]] = _queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def defer(self, allocation: Any, events: list[Any]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pyoffload-opencl-svm-free", daemon=True)
                self._thread.start()
        self._jobs.put((allocation, events))

    def _run(self) -> None:
        from .events import wait

        while True:
            allocation, events = self._jobs.get()
            for event in events:
                try:
                    wait(event)
                except Exception:
                    pass  # failed work is finished work; the memory can go
            allocation.release()

    def drain(self) -> None:
        """Wait until every deferred free so far has happened (tests, shutdown)."""
        done = threading.Event()
        if self._thread is None:
            return
        self._jobs.put((_Signal(done), []))
        done.wait()


class _Signal:
    def __init__(self, flag: threading.Event) -> None:
        self._flag = flag

    def release(self) -> None:
        self._flag.set()


_REAPER = _Reaper()


def queue_for(device: OclDevice | None, queue: Any, *ptrs: int) -> tuple[Any, bool]:
    """The cl queue to run a copy on, and whether the call must wait for it.

    With a queue, its cl queue.  Without, the internal queue of the context owning the first
    SVM address among ``ptrs`` (SVM commands must run on a queue of the owning context).
    """
    if queue is not None:
        return queue.cl_queue, False
    for ptr in ptrs:
        context = REGISTRY.context_of(ptr)
        if context is not None:
            dev = device if device is not None and device in context.devices else None
            return context.internal_queue(dev), True
    raise UnsupportedError(
        "no OpenCL context owns these addresses; OpenCL copies need an SVM pointer"
    )
