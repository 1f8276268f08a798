"""Queues, events, launches and prepared launches.

Launch arguments are checked here, for every backend, before the backend sees them: every pointer
must lie in a live allocation the device can use, in a range pinned for the device, or be NULL
(``None``); scalars are numpy scalars; ``LocalMemory`` reserves local memory.  When the image
declares its signature, the count and kinds are checked too.  Python ``int`` is always a pointer
and Python ``float`` is refused, so the same call means the same thing on every backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .backend import LocalMemory
from .enums import AllocKind, MemoryConnection
from .errors import (
    BackendError,
    Errc,
    InvalidArgumentError,
    InvalidHandleError,
    InvalidValueError,
)
from .memory import (
    Allocation,
    claim_for_free,
    drain_users,
    unregister,
    allocate,
    check_size,
    free,
    mem_info,
    memcpy,
    memfill,
    memory_connection,
    used_by,
)
from .pinning import device_pointer
from .program import GlobalVariable, Kernel

if TYPE_CHECKING:
    from .context import Context
    from .device import Device


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    if type(value) is int and value > 0:
        return (value, 1, 1)
    if type(value) is tuple and len(value) == 3 and all(type(d) is int and d > 0 for d in value):
        return value  # type: ignore[return-value]
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise InvalidValueError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(type(d) is not int or d <= 0 for d in dims):
        raise InvalidValueError(f"{what} must be 1-3 positive ints, got {value!r}")
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]


_SCALAR_KINDS = {"i": "i", "u": "u", "f": "f"}


def _scalar_kind(value: Any) -> str | None:
    dt = value.dtype
    prefix = _SCALAR_KINDS.get(dt.kind)
    return f"{prefix}{dt.itemsize * 8}" if prefix else None


class Queue:
    """An in-order queue on one device.  Operations return :class:`Event` objects."""

    def __init__(self, context: Context, device: Device, profiling: bool = False) -> None:
        context.check_alive()
        if device not in context.devices:
            raise InvalidArgumentError(f"create_queue: {device!r} is not in {context!r}")
        self.context = context
        self.device = device
        self.profiling = bool(profiling)
        self._disp = device._disp
        self._rt = device._rt
        self._keepalive: list[Any] = []
        self._host_errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.handle = self._disp.queue_create_impl(context.handle, device.handle, self.profiling)
        self._live = True
        with self._rt.lock:
            self._rt.queues[id(self)] = self

    # -- state ----------------------------------------------------------------------------

    def _check_live(self) -> None:
        if not self._live:
            raise InvalidHandleError(f"{self!r} was destroyed", Errc.INVALID_QUEUE)
        if not self._rt.alive:
            raise InvalidHandleError(f"{self!r} belongs to a runtime that was shut down", Errc.INVALID_QUEUE)

    def _event(self, handle: Any) -> Event:
        return Event(self, handle)

    def _completed(self) -> Event:
        return Event(self, None)

    def _keep(self, obj: Any) -> None:
        with self._lock:
            self._keepalive.append(obj)

    def _raise_host_errors(self) -> None:
        if self._host_errors:
            errors, self._host_errors = self._host_errors, []
            raise BackendError(f"a host function on {self!r} raised {errors[0]!r}") from errors[0]

    # -- synchronisation --------------------------------------------------------------------

    def wait(self) -> None:
        """Block until everything enqueued so far has completed; re-raise host-function errors."""
        self._check_live()
        self._disp.queue_synchronize_impl(self.device.handle, self.handle)
        with self._lock:
            self._keepalive.clear()
        self._raise_host_errors()

    def query(self) -> bool:
        """``True`` if all enqueued work has completed (never blocks)."""
        self._check_live()
        done = bool(self._disp.queue_query_impl(self.device.handle, self.handle))
        if done:
            with self._lock:
                self._keepalive.clear()
        return done

    def destroy(self) -> None:
        """Wait for outstanding work and release the queue; using it afterwards is an error."""
        self._check_live()
        self._release(teardown=False)

    def _release(self, teardown: bool) -> None:
        if not self._live:
            return
        self._live = False
        self._rt.epoch += 1
        try:
            self._disp.queue_synchronize_impl(self.device.handle, self.handle)
        finally:
            self._rt.queues.pop(id(self), None)
            self._disp.queue_destroy_impl(self.device.handle, self.handle)
            self._keepalive.clear()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live:
            self.destroy()

    # -- launches ---------------------------------------------------------------------------

    def _check_kernel(self, kernel: Any) -> None:
        if not isinstance(kernel, Kernel):
            raise InvalidArgumentError(f"launch: expected a pyoffload.Kernel, got {type(kernel).__name__}")
        kernel.program._check_loaded()
        if kernel.program.device is not self.device:
            raise InvalidArgumentError(f"launch: {kernel!r} is loaded on {kernel.program.device!r}, not {self.device!r}")

    def _pointer(self, i: int, value: int, holds: list[Allocation]) -> int:
        if value == 0:
            return 0
        hit = self._rt.registry.find(value)
        if hit is not None:
            self._check_reachable(i, hit[2])
            holds.append(hit[2])
            return value
        if device_pointer(self.device, value) is not None:
            return value
        raise InvalidArgumentError(
            f"launch argument {i}: pointer 0x{value:x} is not in a live allocation or in host memory "
            f"pinned for {self.device.id} (pass scalars as numpy scalars, e.g. numpy.int32(5))"
        )

    def _check_reachable(self, i: int, alloc: Allocation) -> None:
        if not alloc._live:
            raise InvalidArgumentError(f"launch argument {i}: {alloc!r} was freed")
        ctx = alloc.context
        if ctx is self.context and (alloc.device is self.device or alloc.kind is not AllocKind.DEVICE):
            return
        if ctx.platform is self.context.platform:
            conn = memory_connection((ctx, alloc.device), (self.context, self.device))
            if conn is MemoryConnection.UNIFIED:
                return
        raise InvalidArgumentError(f"launch argument {i}: {alloc!r} is not usable by kernels on {self.device.id}")

    def _args(self, kernel: Kernel, args: Sequence[Any], holds: list[Allocation]) -> tuple[Any, ...]:
        if not isinstance(args, (list, tuple)):
            raise InvalidArgumentError(f"launch: args must be a list or tuple, got {type(args).__name__}")
        out: list[Any] = []
        for i, a in enumerate(args):
            t = type(a)
            if t is Allocation:
                self._check_reachable(i, a)
                holds.append(a)
                out.append(a.ptr)
            elif t is int:
                out.append(self._pointer(i, a, holds))
            elif a is None:
                out.append(0)
            elif isinstance(a, np.generic):
                if _scalar_kind(a) is None:
                    raise InvalidArgumentError(f"launch argument {i}: unsupported scalar type {a.dtype}")
                out.append(a)
            elif t is LocalMemory:
                out.append(a)
            elif t is GlobalVariable:
                if a.program.device is not self.device:
                    raise InvalidArgumentError(f"launch argument {i}: {a!r} is on another device")
                a.program._check_loaded()
                out.append(a.address)
            elif isinstance(a, int) and not isinstance(a, bool):
                out.append(self._pointer(i, int(a), holds))
            else:
                raise InvalidArgumentError(
                    f"launch argument {i}: {a!r} ({t.__name__}) is not an Allocation, pointer, numpy "
                    "scalar or LocalMemory; pass scalars as numpy scalars, e.g. numpy.float32(2.0)"
                )
        sig = kernel.signature
        if sig is not None:
            self._check_signature(kernel, sig, out)
        return tuple(out)

    @staticmethod
    def _check_signature(kernel: Kernel, sig: Sequence[str], args: list[Any]) -> None:
        if len(sig) != len(args):
            raise InvalidArgumentError(
                f"launch: kernel {kernel.name!r} takes {len(sig)} arguments ({', '.join(sig)}), got {len(args)}"
            )
        for i, (want, a) in enumerate(zip(sig, args)):
            if want == "ptr":
                # a host-style image declares local memory as a plain pointer parameter
                ok = type(a) is int or type(a) is LocalMemory
            elif want == "local":
                ok = type(a) is LocalMemory
            else:
                ok = hasattr(a, "dtype") and _scalar_kind(a) == want
            if not ok:
                got = _scalar_kind(a) if hasattr(a, "dtype") else ("ptr" if type(a) is int else type(a).__name__)
                raise InvalidArgumentError(
                    f"launch argument {i} of kernel {kernel.name!r}: expected {want}, got {got}"
                )

    def _bind(self, kernel: Kernel, grid: Any, block: Any, args: Sequence[Any]) -> tuple[Any, ...]:
        """Check a launch; returns ``(grid, block, normalised args, allocations used)``."""
        self._check_live()
        self._check_kernel(kernel)
        g = _dims(grid, "grid")
        b = _dims(block, "block")
        holds: list[Allocation] = []
        normalised = self._args(kernel, args, holds)
        for a in holds:
            used_by(a, self)  # freeing them now waits for this queue
        return g, b, normalised, holds

    def launch(self, kernel: Kernel, grid: Any, block: Any, args: Sequence[Any] = ()) -> Event:
        """Enqueue ``kernel`` on ``grid`` work-groups of ``block`` work-items."""
        g, b, normalised, _ = self._bind(kernel, grid, block, args)
        return Event(self, self._disp.launch_impl(self.device.handle, self.handle, kernel.handle, g, b, normalised))

    def prepare(self, kernel: Kernel, grid: Any, block: Any, args: Sequence[Any] = ()) -> PreparedLaunch:
        """Check and bind a launch once; calling the result enqueues it again and again."""
        g, b, normalised, holds = self._bind(kernel, grid, block, args)
        fast = self._disp.launch_prepare_impl(self.device.handle, self.handle, kernel.handle, g, b, normalised)
        return PreparedLaunch(self, kernel, g, b, normalised, tuple(holds), fast)

    def launch_host_function(self, fn: Callable[[], Any]) -> Event:
        """Run ``fn()`` on a host thread once earlier work is done; later work waits for it.
        An exception in ``fn`` is re-raised by the next ``wait()``."""
        self._check_live()
        if not callable(fn):
            raise InvalidArgumentError(f"launch_host_function: {fn!r} is not callable")

        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                self._host_errors.append(exc)

        return Event(self, self._disp.enqueue_host_function_impl(self.device.handle, self.handle, run))

    # -- memory ------------------------------------------------------------------------------

    def memcpy(self, dst: Any, src: Any, size: int | None = None) -> Event:
        self._check_live()
        ev = memcpy(dst, src, size, self)
        assert ev is not None
        return ev

    def memfill(self, ptr: Any, pattern: Any, size: int | None = None) -> Event:
        self._check_live()
        ev = memfill(ptr, pattern, size, self)
        assert ev is not None
        return ev

    def alloc_async(self, size: int, kind: AllocKind = AllocKind.DEVICE) -> Allocation:
        """Allocate in stream order where the backend can; otherwise wait for the queue and
        allocate, which gives the same observable order."""
        self._check_live()
        size = check_size(size)
        if kind.__class__ is not AllocKind:
            raise InvalidArgumentError(f"kind must be a pyoffload.AllocKind, got {kind!r}")
        ctx, dev = self.context, self.device
        device_handle = dev.handle if kind is not AllocKind.HOST else None

        def raw() -> int:
            ptr = self._disp.data_alloc_async_impl(ctx.handle, device_handle, self.handle, size, kind)
            if ptr is None:
                raise _NoAsync
            return int(ptr)

        try:
            return allocate(ctx, dev, size, kind, raw=raw)
        except _NoAsync:
            self.wait()
            return allocate(ctx, dev, size, kind)

    def free_async(self, ptr: Allocation | int) -> Event:
        """Free in stream order where the backend can; otherwise wait, then free."""
        self._check_live()
        info = mem_info(ptr)
        if info.offset:
            raise InvalidArgumentError(f"free_async: pointer points {info.offset} bytes into {info.allocation!r}")
        alloc = info.allocation
        if alloc.context is not self.context:
            raise InvalidArgumentError(f"free_async: {alloc!r} is not in the queue's context {self.context!r}")
        if not alloc._bucket:
            if alloc._queues and any(q is not self for q in alloc._queues):
                drain_users(alloc)  # this queue orders the free; other queues must be done
            dh = alloc.device.handle if alloc.device is not None else None
            with self._rt.lock:
                claim_for_free(self._rt, alloc, None)
            try:
                ev = self._disp.data_free_async_impl(alloc.context.handle, dh, self.handle, alloc.ptr, alloc.kind)
            except BaseException:
                alloc._live = True
                raise
            if ev is not None:
                with self._rt.lock:
                    unregister(self._rt, alloc)
                return Event(self, ev)
            alloc._live = True  # no stream-ordered free: fall back to wait, then free
        self.wait()
        free(alloc)
        return self._completed()

    def __repr__(self) -> str:
        return f"<pyoffload.Queue on {self.device.id}{'' if self._live else ' destroyed'}>"


class _NoAsync(Exception):
    pass


class PreparedLaunch:
    """A launch checked and bound once (``Queue.prepare``); ``launch()`` or ``()`` enqueues it.

    The backend's prepared callable is invoked directly when no wrapper plugin is active;
    otherwise each call goes through ``launch_impl`` so tracing and fault injection see it.
    The checks (queue live, program loaded, bound allocations live, wrappers unchanged) are
    repeated only when the runtime's epoch moved: anything that could invalidate them (a free,
    an unload, a queue destroyed, a wrapper added or removed, shutdown) bumps it.
    """

    __slots__ = ("queue", "kernel", "grid", "block", "args", "_holds", "_fast", "_call", "_epoch")

    def __init__(self, queue: Queue, kernel: Kernel, grid: tuple[int, int, int], block: tuple[int, int, int],
                 args: tuple[Any, ...], holds: tuple[Allocation, ...], fast: Callable[[], Any] | None) -> None:
        self.queue = queue
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.args = args
        self._holds = holds
        self._fast = fast
        self._epoch = -1
        self._call: Callable[[], Any] = self._through_hook

    def _through_hook(self) -> Any:
        q = self.queue
        return q._disp.launch_impl(q.device.handle, q.handle, self.kernel.handle, self.grid, self.block, self.args)

    def _revalidate(self) -> None:
        q = self.queue
        epoch = q._rt.epoch
        q._check_live()
        self.kernel.program._check_loaded()
        for a in self._holds:
            if not a._live:
                raise InvalidArgumentError(f"prepared launch of {self.kernel.name!r}: {a!r} was freed")
        self._call = self._fast if self._fast is not None and q._disp.direct else self._through_hook
        self._epoch = epoch

    def __call__(self) -> Event:
        q = self.queue
        if self._epoch != q._rt.epoch:
            self._revalidate()
        return Event(q, self._call())

    launch = __call__


class Event:
    """Completion of one enqueued operation."""

    __slots__ = ("queue", "handle")

    def __init__(self, queue: Queue, handle: Any) -> None:
        self.queue = queue
        self.handle = handle

    def wait(self) -> None:
        """Block until the operation has completed; re-raise a host function's error."""
        if self.handle is not None:
            self.queue._disp.event_wait_impl(self.queue.device.handle, self.handle)
        self.queue._raise_host_errors()

    @property
    def is_complete(self) -> bool:
        if self.handle is None:
            return True
        return bool(self.queue._disp.event_query_impl(self.queue.device.handle, self.handle))

    def elapsed_ms(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event (profiling queues); both must be complete."""
        if not isinstance(start, Event):
            raise InvalidArgumentError(f"elapsed_ms: expected an Event, got {start!r}")
        if not (self.queue.profiling and start.queue.profiling):
            raise InvalidArgumentError("elapsed_ms needs events of queues created with profiling=True")
        if self.handle is None or start.handle is None:
            raise InvalidArgumentError("elapsed_ms: an operation that completed synchronously has no timestamp")
        self.wait()
        start.wait()
        return float(self.queue._disp.event_elapsed_impl(self.queue.device.handle, start.handle, self.handle))

    def __repr__(self) -> str:
        return f"<pyoffload.Event on {self.queue.device.id}>"
