"""Allocations: one dispatch for every kind, the address registry, memcpy and memfill.

Every allocation is recorded in the runtime's registry, keyed by address, so ``free(ptr)`` and
``mem_info(ptr)`` need nothing but a pointer, and any pointer inside an allocation resolves to it.
Sizes and bounds are checked against the registry before any backend is called: a copy past the
end of an allocation is an ``INVALID_SIZE`` error, never a fault in the driver.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .enums import AllocKind, MemAdvice, MemoryConnection
from .errors import (
    InvalidArgumentError,
    InvalidSizeError,
    OutOfResourcesError,
    UnsupportedError,
)
from . import runtime as _runtime
from .pool import Pool
from .program import GlobalVariable
from .tracking import origin

if TYPE_CHECKING:
    import numpy as np

    from .context import Context
    from .device import Device
    from .queue import Event, Queue
    from .runtime import Runtime

STAGING_CHUNK = 8 << 20
_COLLISION_RETRIES = 8


def check_size(size: Any, what: str = "size") -> int:
    if type(size) is not int:
        if isinstance(size, int) and not isinstance(size, bool):
            size = int(size)
        else:
            raise InvalidSizeError(f"{what} must be an int, got {size!r}")
    if size <= 0:
        raise InvalidSizeError(f"{what} must be positive, got {size}")
    return size


class _HostView:
    """Owner of numpy views of an allocation, so ``free`` can tell whether any view is alive."""

    __slots__ = ("__array_interface__", "__weakref__")

    def __init__(self, ptr: int, size: int) -> None:
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class Allocation:
    """A block of memory from ``Context.alloc`` / ``Device.alloc``.

    ``ptr`` is the address (device-accessible; host-accessible too for HOST and MANAGED memory
    and on the host backend).  Host-accessible allocations convert to numpy arrays
    (``numpy.asarray(a)``, ``a.view(dtype)``) and, on Python 3.12+, to ``memoryview``.  Freeing
    an allocation while such a view is alive is refused: a dangling view would be worse.
    """

    __slots__ = ("ptr", "size", "kind", "device", "context", "origin", "_live", "_bucket", "_views", "_queues",
                 "__weakref__")

    def __init__(self, ptr: int, size: int, kind: AllocKind, device: Device | None, context: Context,
                 bucket: int, where: str | None) -> None:
        self.ptr = ptr
        self.size = size
        self.kind = kind
        self.device = device
        self.context = context
        self.origin = where
        self._live = True
        self._bucket = bucket  # pool bucket size, 0 if not from the pool
        self._views: list[weakref.ref[_HostView]] | None = None
        self._queues: set[Queue] | None = None  # queues that were given work on this memory

    @property
    def freed(self) -> bool:
        return not self._live

    @property
    def host_accessible(self) -> bool:
        return self.kind is not AllocKind.DEVICE or (self.device is not None and self.device.host_memory)

    def free(self) -> None:
        free(self)

    def view(self, dtype: Any = "u1") -> np.ndarray:
        """A numpy array over the memory (host-accessible kinds only); valid until ``free``."""
        import numpy as np

        if not self._live:
            raise InvalidArgumentError(f"{self!r} was freed")
        if not self.host_accessible:
            raise UnsupportedError(f"{self!r} is DEVICE memory, not host-accessible: use pyoffload.memcpy")
        owner = _HostView(self.ptr, self.size)
        if self._views is None:
            self._views = []
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(owner))
        arr = np.asarray(owner)
        return arr if np.dtype(dtype) == np.uint8 else arr[: self.size - self.size % np.dtype(dtype).itemsize].view(dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.view()
        return arr if dtype is None else arr.astype(dtype)

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self.view())  # type: ignore[arg-type]  # ndarray is a buffer

    def _live_views(self) -> int:
        return sum(1 for r in self._views or () if r() is not None)

    def __repr__(self) -> str:
        where = self.device.id if self.device is not None else f"{self.context.backend} host memory"
        state = "" if self._live else " freed"
        return f"<pyoffload.Allocation {self.kind.name} 0x{self.ptr:x} size={self.size} on {where}{state}>"


class MemInfo(NamedTuple):
    """What ``mem_info(ptr)`` reports: the allocation containing ``ptr``."""

    base: int
    size: int
    kind: AllocKind
    device: Device | None
    context: Context
    offset: int
    allocation: Allocation


# ------------------------------------------------------------------------------------------
# allocation and free
# ------------------------------------------------------------------------------------------


def _pool(ctx: Context, device: Device) -> Pool | None:
    threshold = ctx._rt.pool_threshold
    if threshold <= 0:
        return None
    pool = ctx._pools.get(id(device))
    if pool is None:
        disp, ch, dh = ctx._disp, ctx.handle, device.handle
        pool = Pool(
            threshold,
            lambda size: _vendor_alloc(ctx, device, size, AllocKind.DEVICE),
            lambda ptr: disp.data_free_impl(ch, dh, ptr, AllocKind.DEVICE),
        )
        ctx._pools[id(device)] = pool
    return pool


def release_pools(ctx: Context, device: Device | None) -> int:
    released = 0
    for key, pool in list(ctx._pools.items()):
        if device is None or key == id(device):
            released += pool.release_all()
    return released


def _vendor_alloc(ctx: Context, device: Device | None, size: int, kind: AllocKind) -> int:
    dh = device.handle if device is not None else None
    try:
        return ctx._disp.data_alloc_impl(ctx.handle, dh, size, kind)
    except OutOfResourcesError:
        # LLVM's MemoryManagerTy: free every cached block of the device and retry once.
        if not release_pools(ctx, device):
            raise
        return ctx._disp.data_alloc_impl(ctx.handle, dh, size, kind)


def allocate(ctx: Context, device: Device | None, size: int, kind: AllocKind,
             raw: Callable[[], int] | None = None) -> Allocation:
    """The one allocation path.  ``raw`` overrides how the address is obtained (async alloc)."""
    rt = ctx._rt
    if not ctx.alive or not rt.alive:
        ctx.check_alive()
    if type(size) is not int or size <= 0:
        size = check_size(size)
    if kind.__class__ is not AllocKind:
        raise InvalidArgumentError(f"kind must be a pyoffload.AllocKind, got {kind!r}")
    if kind is AllocKind.HOST:
        device = None
    elif device is None:
        device = ctx.devices[0]
    elif device not in ctx.devices:
        raise InvalidArgumentError(f"device {device!r} is not in {ctx!r}")
    bucket = 0
    pool = None
    if raw is None and kind is AllocKind.DEVICE and size <= rt.pool_threshold:
        pool = _pool(ctx, device)  # type: ignore[arg-type]
    if pool is not None:
        ptr, bucket = pool.take(size)
    elif raw is not None:
        ptr = raw()
    else:
        ptr = _vendor_alloc(ctx, device, size, kind)
    tracker = rt.tracker
    alloc = Allocation(ptr, size, kind, device, ctx, bucket, origin() if tracker.on else None)
    held: list[Allocation] = []
    try:
        with rt.lock:
            for _ in range(_COLLISION_RETRIES):
                if not _collides(rt, ctx._backend.name, alloc.ptr, alloc.ptr + size):
                    register(rt, alloc)
                    break
                # Two backends handed out overlapping addresses: keep this block aside so the
                # backend cannot return it again, and ask for another (as liboffload does).
                held.append(alloc)
                ptr = raw() if raw is not None else _vendor_alloc(ctx, device, size, kind)
                alloc = Allocation(ptr, size, kind, device, ctx, 0, alloc.origin)
            else:
                held.append(alloc)
                raise OutOfResourcesError(
                    f"backend {ctx.backend!r} keeps returning addresses that collide with live allocations"
                )
    finally:
        for h in held:
            _release_block(h)
    if tracker.on:
        tracker.allocated(alloc)
    return alloc


def _collides(rt: Runtime, backend: str, base: int, end: int) -> bool:
    """Whether ``[base, end)`` overlaps a live allocation.  A backend's own allocator never
    returns overlapping live blocks, so the full range check is made only while another backend
    has live memory too (that is where address spaces can coincide)."""
    registry = rt.registry
    if registry.get(base) is not None:
        return True
    live = rt.live_per_backend
    if len(live) > 1 or (live and backend not in live):
        return bool(registry.overlapping(base, end))
    return False


def register(rt: Runtime, alloc: Allocation) -> None:
    rt.registry.insert(alloc.ptr, alloc.ptr + alloc.size, alloc)
    alloc.context._allocs[alloc.ptr] = alloc
    live = rt.live_per_backend
    backend = alloc.context._backend.name
    live[backend] = live.get(backend, 0) + 1


def unregister(rt: Runtime, alloc: Allocation) -> None:
    rt.epoch += 1
    rt.registry.remove(alloc.ptr)
    alloc.context._allocs.pop(alloc.ptr, None)
    live = rt.live_per_backend
    backend = alloc.context._backend.name
    if live[backend] == 1:
        del live[backend]
    else:
        live[backend] -= 1
    if rt.tracker.on:
        rt.tracker.freed_alloc(alloc)


def _release_block(alloc: Allocation) -> None:
    ctx = alloc.context
    if alloc._bucket:
        ctx._pools[id(alloc.device)].give(alloc.ptr, alloc._bucket)
    else:
        dh = alloc.device.handle if alloc.device is not None else None
        ctx._disp.data_free_impl(ctx.handle, dh, alloc.ptr, alloc.kind)


def lookup(rt: Runtime, ptr: int, what: str = "pointer") -> tuple[Allocation, int]:
    """The live allocation containing ``ptr`` and the offset into it."""
    hit = rt.registry.find(ptr)
    if hit is None:
        raise InvalidArgumentError(f"{what} 0x{ptr:x} is not in any live allocation{rt.tracker.history(ptr)}")
    return hit[2], ptr - hit[0]


def used_by(alloc: Allocation, queue: Queue) -> None:
    """Record that ``queue`` has work on ``alloc``: freeing it will wait for that queue first."""
    users = alloc._queues
    if users is None:
        alloc._queues = {queue}
    elif queue not in users:
        users.add(queue)


def drain_users(alloc: Allocation) -> None:
    # As cudaFree: memory still used by queued work is released only once that work is done,
    # so a kernel can never write into the next allocation at the same address.
    users, alloc._queues = alloc._queues, None
    for queue in users or ():
        if queue._live:
            queue._disp.queue_synchronize_impl(queue.device.handle, queue.handle)


def claim_for_free(rt: Runtime, target: Any, kind: AllocKind | None) -> Allocation:
    if isinstance(target, Allocation):
        alloc = target
        if not alloc._live:
            raise InvalidArgumentError(f"double free of {alloc!r}{rt.tracker.history(alloc.ptr)}")
    elif isinstance(target, int) and not isinstance(target, bool):
        hit = rt.registry.find(target)
        if hit is None:
            raise InvalidArgumentError(
                f"free: pointer 0x{target:x} is not a live allocation{rt.tracker.history(target)}"
            )
        alloc = hit[2]
        if hit[0] != target:
            raise InvalidArgumentError(
                f"free: pointer 0x{target:x} points {target - hit[0]} bytes into {alloc!r}; "
                "free takes the allocation's base pointer"
            )
    else:
        raise InvalidArgumentError(f"free takes an Allocation or a pointer (int), got {target!r}")
    if kind is not None and alloc.kind is not kind:
        where = f" (allocated at {alloc.origin})" if alloc.origin else ""
        raise InvalidArgumentError(f"free: {alloc!r} is {alloc.kind.name} memory, not {kind.name}{where}")
    views = alloc._live_views() if alloc._views else 0
    if views:
        raise InvalidArgumentError(
            f"free: {alloc!r} still has {views} live host view(s); delete them before freeing"
        )
    alloc._live = False
    return alloc


def free(target: Allocation | int, kind: AllocKind | None = None) -> None:
    """Free an allocation, given the Allocation or its base pointer (of any context or backend).

    ``kind``, if given, must match the allocation's kind (a check against freeing the wrong kind).
    """
    rt = target.context._rt if isinstance(target, Allocation) else _runtime.current()
    rt.check_alive()
    with rt.lock:
        alloc = claim_for_free(rt, target, kind)
        if alloc._bucket and not alloc._queues:
            # A pooled block with no queued work: back to its bucket, no backend call at all.
            alloc.context._pools[id(alloc.device)].give(alloc.ptr, alloc._bucket)
            unregister(rt, alloc)
            return
    try:
        if alloc._queues:
            drain_users(alloc)
        _release_block(alloc)
    except BaseException:
        alloc._live = True  # the backend kept it: it stays allocated and registered
        raise
    with rt.lock:
        unregister(rt, alloc)


def mem_info(ptr: Allocation | int) -> MemInfo:
    """Describe the allocation containing ``ptr`` (any address inside it)."""
    if isinstance(ptr, Allocation):
        if not ptr._live:
            raise InvalidArgumentError(f"mem_info: {ptr!r} was freed")
        ptr = ptr.ptr
    elif not isinstance(ptr, int) or isinstance(ptr, bool):
        raise InvalidArgumentError(f"mem_info takes an Allocation or a pointer (int), got {ptr!r}")
    rt = _runtime.current()
    alloc, offset = lookup(rt, ptr, "mem_info: pointer")
    return MemInfo(alloc.ptr, alloc.size, alloc.kind, alloc.device, alloc.context, offset, alloc)


def free_context_allocations(ctx: Context) -> None:
    for alloc in list(ctx._allocs.values()):
        if alloc._live:
            free(alloc)


def release_all(rt: Runtime, warn: Callable[[str, BaseException], None], at_exit: bool = False) -> None:
    """Teardown: free every live allocation; one with live host views is leaked, not freed (at
    interpreter exit silently: module globals still hold their views then, and the process ends)."""
    for _, _, alloc in list(rt.registry):
        if alloc._views and alloc._live_views():
            if not at_exit:
                warn(f"freeing {alloc!r}", RuntimeError("host views still alive: leaked rather than left dangling"))
            continue
        alloc._live = False
        try:
            _release_block(alloc)
        except BaseException as exc:
            warn(f"freeing {alloc!r}", exc)
    rt.registry.clear()
    rt.live_per_backend.clear()
    rt.epoch += 1
    for ctx in rt.contexts:
        ctx._allocs.clear()
        for pool in ctx._pools.values():
            try:
                pool.release_all()
            except BaseException as exc:
                warn(f"releasing the pool of {ctx!r}", exc)


# ------------------------------------------------------------------------------------------
# memory connection
# ------------------------------------------------------------------------------------------


def _side(pair: Any) -> tuple[Context, Device | None]:
    from .context import Context

    if isinstance(pair, Context):
        return pair, None
    try:
        ctx, dev = pair
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"memory_connection takes (context, device) pairs, got {pair!r}") from None
    if not isinstance(ctx, Context):
        raise InvalidArgumentError(f"memory_connection: {ctx!r} is not a Context")
    if dev is not None and dev not in ctx.devices and not dev.host_memory:
        raise InvalidArgumentError(f"memory_connection: {dev!r} is not in {ctx!r}")
    if dev is not None and dev.host_memory and ctx.platform is not dev.platform:
        dev = None  # the implicit host of a context: its HOST memory
    return ctx, dev


def memory_connection(a: Any, b: Any) -> MemoryConnection:
    """How memory of ``(ctx_a, dev_a)`` reaches ``(ctx_b, dev_b)``; a device of ``None`` (or the
    host device) means the context's HOST memory.

    UNIFIED: the same pointer works on both sides.  MIGRATABLE: the backend copies directly.
    NONE: copies go through host memory.
    """
    ca, da = _side(a)
    cb, db = _side(b)
    ca.check_alive()
    cb.check_alive()
    host_a = da is None or da.host_memory
    host_b = db is None or db.host_memory
    if ca.platform is not cb.platform:
        # Only host memory on both sides is shared across platforms and backends.
        return MemoryConnection.UNIFIED if host_a and host_b else MemoryConnection.NONE
    answer = ca._disp.memory_connection_impl(
        ca.handle, da.handle if da is not None else None, cb.handle, db.handle if db is not None else None
    )
    if answer is not None:
        return MemoryConnection(answer)
    if ca is cb:
        if da is db or host_a or host_b:
            return MemoryConnection.UNIFIED
        return MemoryConnection.MIGRATABLE
    if da is not None and db is not None and da.host_memory and db.host_memory:
        return MemoryConnection.UNIFIED  # the host's own memory, whatever the context
    return MemoryConnection.NONE


# ------------------------------------------------------------------------------------------
# memcpy / memfill
# ------------------------------------------------------------------------------------------


class _End:
    """One side of a copy: host memory (``mv``/``addr``) and/or memory of a backend device."""

    __slots__ = ("addr", "avail", "mv", "alloc", "device", "ctx", "host_ok")

    def __init__(self) -> None:
        self.addr = 0
        self.avail = 0
        self.mv: memoryview | None = None
        self.alloc: Allocation | None = None
        self.device: Device | None = None
        self.ctx: Context | None = None
        self.host_ok = False


def _buffer_address(mv: memoryview) -> int:
    if not mv.nbytes:
        return 0
    if not mv.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv))
    import numpy as np  # the one portable way to get a read-only buffer's address

    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)


def _resolve(rt: Runtime, obj: Any, role: str, writable: bool) -> _End:
    end = _End()
    if isinstance(obj, Allocation):
        if not obj._live:
            raise InvalidArgumentError(f"{role}: {obj!r} was freed{rt.tracker.history(obj.ptr)}")
        alloc, offset = obj, 0
        end.addr = obj.ptr
    elif isinstance(obj, int) and not isinstance(obj, bool):
        hit = rt.registry.find(obj)
        if hit is None:
            from .pinning import find_pinned

            pinned = find_pinned(rt, obj, device_addresses=True)
            if pinned is None:
                raise InvalidArgumentError(
                    f"{role}: pointer 0x{obj:x} is neither in a live allocation nor in pinned host memory"
                    f"{rt.tracker.history(obj)}"
                )
            end.addr, end.avail = pinned
            end.host_ok = True
            return end
        alloc, offset = hit[2], obj - hit[0]
        end.addr = obj
    elif isinstance(obj, GlobalVariable):
        obj.program._check_loaded()
        end.addr, end.avail = obj.address, obj.size
        end.device, end.ctx = obj.program.device, obj.program.context
        return end
    else:
        try:
            mv = memoryview(obj)
        except TypeError:
            raise InvalidArgumentError(
                f"{role}: expected an Allocation, a pointer or a buffer, got {type(obj).__name__}"
            ) from None
        if not mv.c_contiguous:
            raise InvalidArgumentError(f"{role}: buffer must be C-contiguous")
        if writable and mv.readonly:
            raise InvalidArgumentError(f"{role}: buffer is read-only")
        end.mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        end.avail, end.host_ok = mv.nbytes, True
        return end
    end.alloc, end.avail = alloc, alloc.size - offset
    end.ctx = alloc.context
    end.device = alloc.device if alloc.device is not None else alloc.context.devices[0]
    end.host_ok = alloc.host_accessible
    return end


def _host_view(end: _End, size: int) -> memoryview:
    if end.mv is not None:
        return end.mv[:size]
    return memoryview((ctypes.c_char * size).from_address(end.addr)).cast("B")


def _check_queue(queue: Queue | None, device: Device, role: str) -> Any:
    if queue is None:
        return None
    queue._check_live()
    if queue.device._backend is not device._backend or queue.context is not None and queue.device.platform is not device.platform:
        raise InvalidArgumentError(f"{role}: {queue!r} cannot order work on {device!r}")
    return queue.handle


def memcpy(dst: Any, src: Any, size: int | None = None, queue: Queue | None = None) -> Event | None:
    """Copy ``size`` bytes from ``src`` to ``dst``: host buffers, allocations of any kind, pointers
    into them, pinned host pointers, or program globals, on any devices and backends.

    ``size`` defaults to the smaller of the two sides.  With a ``queue`` the copy is ordered on it
    and an :class:`Event` is returned; the source buffer is kept alive until the queue is waited on.
    """
    rt = _runtime.current()
    d = _resolve(rt, dst, "memcpy dst", True)
    s = _resolve(rt, src, "memcpy src", False)
    if size is None:
        size = min(d.avail, s.avail)
    if type(size) is not int or size <= 0:
        size = check_size(size, "memcpy size")
    if size > s.avail:
        raise InvalidSizeError(f"memcpy size {size} reads past the end of src ({s.avail} bytes available)")
    if size > d.avail:
        raise InvalidSizeError(f"memcpy size {size} writes past the end of dst ({d.avail} bytes available)")
    return _copy(d, s, size, queue)


def _copy(d: _End, s: _End, size: int, queue: Queue | None) -> Event | None:
    if queue is not None:
        for end in (d, s):
            if end.alloc is not None:
                used_by(end.alloc, queue)
    if queue is None and d.host_ok and s.host_ok:
        ctypes.memmove(d.addr if d.mv is None else _buffer_address(d.mv),
                       s.addr if s.mv is None else _buffer_address(s.mv), size)
        return None
    if d.device is not None and s.device is not None:
        if d.device._backend is s.device._backend and d.ctx is not None and s.ctx is not None:
            conn = memory_connection((s.ctx, s.device), (d.ctx, d.device))
            if conn is not MemoryConnection.NONE:
                qh = _check_queue(queue, d.device, "memcpy")
                try:
                    ev = d.device._disp.data_exchange_impl(s.device.handle, s.addr, d.device.handle, d.addr, size, qh)
                    return queue._event(ev) if queue is not None else None
                except UnsupportedError:
                    pass
        if s.host_ok:
            return _submit(d, _host_view(s, size), size, queue)
        if d.host_ok:
            return _retrieve(_host_view(d, size), s, size, queue)
        return _staged(d, s, size, queue)
    if d.device is not None:
        return _submit(d, _host_view(s, size), size, queue)
    if s.device is not None:
        return _retrieve(_host_view(d, size), s, size, queue)
    # host to host, ordered after the queue's earlier work
    queue._check_live()  # type: ignore[union-attr]
    queue.wait()  # type: ignore[union-attr]
    return _copy(d, s, size, None) or queue._completed()  # type: ignore[union-attr]


def _submit(d: _End, src: memoryview, size: int, queue: Queue | None) -> Event | None:
    qh = _check_queue(queue, d.device, "memcpy")  # type: ignore[arg-type]
    dev = queue.device if queue is not None else d.device
    ev = dev._disp.data_submit_impl(dev.handle, qh, d.addr, src, size)  # type: ignore[union-attr]
    if queue is None:
        return None
    queue._keep(src)
    return queue._event(ev)


def _retrieve(dst: memoryview, s: _End, size: int, queue: Queue | None) -> Event | None:
    qh = _check_queue(queue, s.device, "memcpy")  # type: ignore[arg-type]
    dev = queue.device if queue is not None else s.device
    ev = dev._disp.data_retrieve_impl(dev.handle, qh, dst, s.addr, size)  # type: ignore[union-attr]
    if queue is None:
        return None
    queue._keep(dst)
    return queue._event(ev)


def _staged(d: _End, s: _End, size: int, queue: Queue | None) -> Event | None:
    """Copy through a bounded host buffer, chunk by chunk, so any size fits in host memory."""
    if queue is not None:
        queue.wait()
    chunk = min(size, STAGING_CHUNK)
    staging = memoryview(bytearray(chunk))
    done = 0
    while done < size:
        n = min(chunk, size - done)
        s.device._disp.data_retrieve_impl(s.device.handle, None, staging[:n], s.addr + done, n)  # type: ignore[union-attr]
        d.device._disp.data_submit_impl(d.device.handle, None, d.addr + done, staging[:n], n)  # type: ignore[union-attr]
        done += n
    return queue._completed() if queue is not None else None


def _pattern_bytes(pattern: Any) -> bytes:
    if isinstance(pattern, (bytes, bytearray, memoryview)):
        data = bytes(pattern)
    elif hasattr(pattern, "dtype") and hasattr(pattern, "tobytes") and getattr(pattern, "ndim", 0) == 0:
        data = pattern.tobytes()
    else:
        raise InvalidArgumentError(
            f"memfill pattern must be bytes or a numpy scalar (e.g. numpy.uint32(7)), got {pattern!r}"
        )
    if not data:
        raise InvalidSizeError("memfill pattern is empty")
    return data


def memfill(ptr: Any, pattern: Any, size: int | None = None, queue: Queue | None = None) -> Event | None:
    """Fill ``size`` bytes at ``ptr`` with ``pattern`` repeated (bytes or a numpy scalar of any
    width); ``size`` must be a multiple of the pattern length and defaults to the rest of the
    allocation (rounded down to whole patterns)."""
    rt = _runtime.current()
    pat = _pattern_bytes(pattern)
    end = _resolve(rt, ptr, "memfill dst", True)
    if size is None:
        size = end.avail - end.avail % len(pat)
    size = check_size(size, "memfill size")
    if size % len(pat):
        raise InvalidSizeError(f"memfill size {size} is not a multiple of the pattern length {len(pat)}")
    if size > end.avail:
        raise InvalidSizeError(f"memfill size {size} writes past the end of dst ({end.avail} bytes available)")
    if end.device is None or (queue is None and end.host_ok):
        if queue is not None:
            queue.wait()
        _host_fill(_host_view(end, size), pat)
        return queue._completed() if queue is not None else None
    qh = _check_queue(queue, end.device, "memfill")
    dev = queue.device if queue is not None else end.device
    try:
        ev = dev._disp.data_fill_impl(dev.handle, qh, end.addr, pat, size)
    except UnsupportedError:
        # Patterns the device cannot fill natively: write the expanded pattern in chunks.
        if queue is not None:
            queue.wait()
        chunk = max(len(pat), STAGING_CHUNK - STAGING_CHUNK % len(pat))
        block = memoryview(bytearray(min(chunk, size)))
        _host_fill(block, pat)
        done = 0
        while done < size:
            n = min(len(block), size - done)
            dev._disp.data_submit_impl(dev.handle, None, end.addr + done, block[:n], n)
            done += n
        return queue._completed() if queue is not None else None
    return queue._event(ev) if queue is not None else None


def _host_fill(dst: memoryview, pat: bytes) -> None:
    import numpy as np

    arr = np.frombuffer(dst, dtype=np.uint8)
    n = len(pat)
    if n in (1, 2, 4, 8):
        arr.view(f"u{n}").fill(np.frombuffer(pat, dtype=f"u{n}")[0])
    else:
        arr.reshape(-1, n)[:] = np.frombuffer(pat, dtype=np.uint8)


# ------------------------------------------------------------------------------------------
# managed-memory hints
# ------------------------------------------------------------------------------------------


def prefetch(ptr: Any, size: int, to: Device | None = None, queue: Queue | None = None) -> Event | None:
    """Migrate a MANAGED range to device ``to`` (``None``: to the host).  A hint: a pointer that
    is not MANAGED memory is ignored, as in liboffload."""
    rt = _runtime.current()
    size = check_size(size)
    end = _resolve(rt, ptr, "prefetch ptr", False)
    if size > end.avail:
        raise InvalidSizeError(f"prefetch size {size} reaches past the end of the allocation ({end.avail} bytes)")
    if end.alloc is None or end.alloc.kind is not AllocKind.MANAGED:
        return queue._completed() if queue is not None else None
    dev = to if to is not None else end.device
    assert dev is not None
    qh = _check_queue(queue, dev, "prefetch")
    ev = dev._disp.data_prefetch_impl(dev.handle, qh, end.addr, size, to is not None)
    return queue._event(ev) if queue is not None else None


def advise(ptr: Any, size: int, advice: MemAdvice, device: Device | None = None) -> None:
    """Give a usage hint for a MANAGED range; ignored for other memory."""
    if not isinstance(advice, MemAdvice):
        raise InvalidArgumentError(f"advice must be a pyoffload.MemAdvice, got {advice!r}")
    rt = _runtime.current()
    size = check_size(size)
    end = _resolve(rt, ptr, "advise ptr", False)
    if size > end.avail:
        raise InvalidSizeError(f"advise size {size} reaches past the end of the allocation ({end.avail} bytes)")
    if end.alloc is None or end.alloc.kind is not AllocKind.MANAGED:
        return
    dev = device or end.device
    assert dev is not None
    dev._disp.data_advise_impl(dev.handle, end.addr, size, advice)
