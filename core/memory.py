"""Allocations: the one allocation path for every kind, the address registry, free and mem_info.

Every allocation comes from its context's caching allocator (:mod:`pyoffload.pool`) and is
recorded in the runtime's registry keyed by address, so ``free(ptr)`` and ``mem_info(ptr)`` need
nothing but a pointer and any pointer inside an allocation resolves to it.  Globals of loaded
programs and imported foreign memory are recorded too, as *external* allocations: they resolve
like any other, but pyoffload never frees them.

Lifetimes: every queued operation that uses an allocation records itself in the allocation's
``users`` (queue -> sequence number of the last such operation).  ``free`` waits for exactly those
operations, as ``cuMemFree`` does, then returns the block to the pool.  Inside a host function,
waiting for the host function's own queue would never finish: such a free is deferred until the
queue has passed the operations that use the memory.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import numpy as np

from . import dlpack
from . import bufferbase  # compiled, its .pxd is cimported too: Allocation extends the C type
from .context import GenericContext
from .device import GenericDevice
from .enums import AllocKind
from .errors import (
    got,
    Errc,
    InvalidArgumentError,
    InvalidSizeError,
    NotFoundError,
    OffloadError,
    OutOfResourcesError,
    UnsupportedError,
)
from .checks import MAX_SIZE, check_alignment, check_kind, check_size, pointer_value
from .addresses.intervals import RangeMap
from .locks import check_not_reentered, defer, held_by_me, run_deferred
from .locks import pending as _pending
from .pool import Block, CachingAllocator
from .queue_core import QueueCore, clear_users, running_host_function, users_of
from . import runtime as _runtime
from .views import TypedView, dlpack_device, host_holder, layout
from .runtime import CLOSING, LIVE, Runtime, active, dead_runtime_error, warn_teardown
from .tracking import origin

_COLLISION_RETRIES = 8
_new = bufferbase.BufferBase.__new__  # for host views (Allocation.__new__ makes allocations)
_HOST, _DEVICE = AllocKind.HOST, AllocKind.DEVICE  # an Enum member read from its class costs ~60 ns


class Allocation(bufferbase.BufferBase):
    """A block of memory: from ``Context.alloc`` / ``Device.alloc`` / ``Queue.alloc_async``, or an
    external range (a program's global, memory imported with ``from_dlpack`` or ``from_native``).

    ``ptr`` is the address (device-accessible; host-accessible too for HOST and MANAGED memory and
    on the host backend); ``size`` the bytes requested.  Host-accessible allocations export their
    bytes through the buffer protocol on every supported Python (``memoryview(a)``,
    ``numpy.frombuffer(a)``, ``numpy.asarray(a)``), ``__array_interface__``, DLPack and typed views
    (``a.view(dtype, shape)``).  Freeing an allocation while an export (a memoryview, an array, a
    DLPack consumer) still points into it is refused: a dangling view would be worse.
    """

    # Fixed at creation: size, kind, device, context, origin, owned, pool_block, source_pool, site.
    # Guarded by the registry's lock (``context.rt.registry.lock``): live, exportable (BufferBase),
    # dl_exports, owner; a free's claim reads the export counts under it (see ``_claim``).
    # ``users`` is guarded by pyoffload.queue_core._users_lock (record_user, users_of, clear_users).
    __slots__ = (
        "size",
        "kind",
        "device",
        "context",
        "origin",
        "owned",
        "owner",
        "live",
        "pool_block",
        "source_pool",
        "site",
        "users",
        "dl_exports",
        "__weakref__",
    )

    size: int
    kind: AllocKind
    device: GenericDevice | None
    context: GenericContext
    origin: str | None
    owned: bool  # pyoffload's own memory (else: a global or foreign memory, never freed by us)
    owner: Any  # what keeps external memory alive
    live: bool  # not yet freed or released
    pool_block: Block | None
    source_pool: CachingAllocator | None
    site: AllocSite | None  # where it came from (None: external memory)
    users: dict[QueueCore, int] | None  # queue -> sequence number of the last operation using it
    dl_exports: int  # DLPack exports of memory the buffer protocol does not count (device memory)

    teardown_rank = 2

    @property
    def freed(self) -> bool:
        return not self.live

    @property
    def host_accessible(self) -> bool:
        return self.kind is not _DEVICE or (self.device is not None and self.device.host_memory)

    def free(self) -> None:
        """Free the allocation (``pyoffload.free(self)``)."""
        free(self)

    def release(self) -> None:
        """Let go of an external allocation (``from_dlpack``, ``from_native``) and its producer,
        once queued work that uses it has completed.  pyoffload's own memory is freed, not
        released."""
        if self.owned:
            raise InvalidArgumentError(f"release: {self!r} is pyoffload's own memory: use free")
        if not self.live:
            raise InvalidArgumentError(f"release: {self!r} was released already")
        if self.export_count or self.dl_exports:
            raise InvalidArgumentError(f"release: {self!r} is still exported {self.exports} time(s)")
        for queue, seq in users_of(self):
            if queue.live:
                queue.wait_done(seq)
        unregister(self.context.rt, self)
        owner, self.owner = self.owner, None
        if isinstance(owner, dlpack.Imported):
            owner.release()

    # -- host views ---------------------------------------------------------------------------

    def check_host(self, what: str) -> None:
        if not self.live:
            raise InvalidArgumentError(f"{what}: {self!r} was freed")
        if not self.host_accessible:
            raise UnsupportedError(f"{what}: {self!r} is DEVICE memory, not host-accessible: use pyoffload.memcpy")

    def view(self, dtype: Any = np.uint8, shape: Any = None, offset: int = 0, owner: Any = None) -> np.ndarray:
        """A numpy array over exactly ``shape`` items of ``dtype`` starting ``offset`` bytes in
        (``shape`` ``None``: as many whole items as fit; an int or a tuple).  Host-accessible
        memory only.

        The array keeps this Allocation and ``owner`` (e.g. a framework's own array object)
        alive; ``free`` refuses while it is alive.
        """
        self.check_host("view")
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise InvalidArgumentError(f"view: dtype {dt} holds Python objects")
        dims, count, offset = layout(self, dt, shape, offset, "view")
        nbytes = count * dt.itemsize
        holder = host_holder(self, offset, nbytes, owner)
        return np.frombuffer(holder, dtype=dt, count=count).reshape(dims)  # type: ignore[call-overload, no-any-return]

    @property
    def exports(self) -> int:
        """Live exports of this memory: memoryviews, numpy arrays, views, DLPack consumers."""
        return self.export_count + self.dl_exports

    @property
    def __array_interface__(self) -> dict[str, Any]:
        self.check_host("__array_interface__")
        return TypedView(self, np.uint8).__array_interface__  # its "data" holds an export

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """numpy 2's protocol: ``copy=True`` always copies, ``copy=False`` never does (a dtype
        change is then a ``ValueError``), ``None`` copies only for a dtype change."""
        self.check_host("__array__")
        arr = np.frombuffer(self, dtype=np.uint8)  # type: ignore[call-overload]
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError(f"converting {self!r} to {np.dtype(dtype)} needs a copy, and copy=False")
            return arr.astype(dtype)  # type: ignore[no-any-return]
        return arr.copy() if copy else arr  # type: ignore[no-any-return]

    # -- for other libraries -----------------------------------------------------------------

    def typed(self, dtype: Any = np.uint8, shape: Any = None, offset: int = 0, owner: Any = None) -> TypedView:
        """A typed view of any kind of memory for other libraries: DLPack (``torch.from_dlpack``,
        ``numpy.from_dlpack``), the array interface and the CUDA array interface."""
        return TypedView(self, dtype, shape, offset, owner)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        return TypedView(self, np.uint8).__dlpack__(
            stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA array interface of the whole allocation.  A consumer keeps the Allocation
        itself, so this read counts no export (``free`` cannot see it): hand other libraries
        ``a.typed(...)``, whose interface counts one for as long as the view lives."""
        return TypedView(self, np.uint8).__cuda_array_interface__

    # -- teardown -----------------------------------------------------------------------------

    def teardown(self, at_exit: bool) -> None:
        """Context close or shutdown: free (leak instead if host views are alive)."""
        if not self.live:
            return
        if self.export_count or self.dl_exports:
            if not at_exit:
                warn_teardown(
                    f"freeing {self!r}", RuntimeError("its memory is still exported: leaked rather than left dangling")
                )
            return
        if not self.owned:
            unregister(self.context.rt, self)
            owner, self.owner = self.owner, None
            if isinstance(owner, dlpack.Imported):
                owner.release()
            return
        try:
            free(self)
        except Exception as exc:
            warn_teardown(f"freeing {self!r}", exc)

    def __repr__(self) -> str:
        where = self.device.id if self.device is not None else f"{self.context.backend} host memory"
        state = "" if self.live else " freed"
        extern = "" if self.owned else " external"
        return f"<pyoffload.Allocation {self.kind.name} 0x{self.ptr:x} size={self.size} on {where}{extern}{state}>"


class MemInfo(NamedTuple):
    """What ``mem_info(ptr)`` reports: the allocation containing ``ptr``."""

    base: int
    size: int
    kind: AllocKind
    device: GenericDevice | None
    context: GenericContext
    offset: int
    allocation: Allocation


_tuple_new = tuple.__new__


# ------------------------------------------------------------------------------------------
# allocation
# ------------------------------------------------------------------------------------------


MIN_ALIGNMENT = 16
"""What every allocation's address is a multiple of, as malloc's (a backend's duty, checked by the
conformance suite's ``test_pointers_are_aligned_for_any_scalar``): smaller alignments cost nothing."""


class SpaceCount:
    """Owned live allocations of one backend (guarded by the registry's lock)."""

    __slots__ = ("live",)

    def __init__(self) -> None:
        self.live = 0


class LiveCounts:
    """Owned live allocations per backend and in all, guarded by the registry's lock: an
    allocation's range is checked for overlap with other backends' only while another backend
    has live memory (``total`` above its own backend's count), since address spaces of two
    backends can coincide, while one backend never hands out overlapping live blocks."""

    __slots__ = ("total", "per_space")

    def __init__(self) -> None:
        self.total = 0
        self.per_space: dict[str, SpaceCount] = {}

    def of(self, space: str) -> SpaceCount:
        """The count of backend ``space`` (lock held)."""
        count = self.per_space.get(space)
        if count is None:
            count = self.per_space[space] = SpaceCount()
        return count

    def recount(self, registry: RangeMap) -> None:
        """Count again from the registry, the source of truth (lock held): after an exception
        that may have come between a registration and its count."""
        for count in self.per_space.values():
            count.live = 0
        total = 0
        for _, _, alloc in registry.items():
            if alloc.owned and alloc.live and alloc.site is not None:
                count = self.of(alloc.site.space)
                count.live += 1
                total += 1
        self.total = total

    def snapshot(self) -> dict[str, int]:
        """``{backend: live allocations}`` of the backends that have any."""
        return {space: count.live for space, count in self.per_space.items() if count.live}


def live_counts(rt: Runtime) -> LiveCounts:
    """The runtime's :class:`LiveCounts`, made on first use (lock held)."""
    counts = rt.live_counts
    if counts is None:
        counts = rt.live_counts = LiveCounts()
    return counts  # type: ignore[no-any-return]


class AllocSite:
    """Where the allocations of one (context, device, kind) come from: what :meth:`allocate` and
    ``free`` need of the context, the device and the runtime, looked up once (an allocation's hot
    path then reads typed fields, not attributes of four objects).

    Everything is fixed at creation but ``open``, which the context clears under its own lock
    before it releases its pools (:meth:`GenericContext._release`): a site that is not open sends
    its caller back to :func:`site_of`.  The site's pool shares the registry's lock (``lock``), so
    that taking a cached block and recording it, or forgetting an allocation and returning its
    block, is one section of one lock.
    """

    __slots__ = (
        "context",
        "device",
        "kind",
        "pool",
        "rt",
        "registry",
        "lock",
        "space",
        "exportable",
        "max_alloc",
        "counts",
        "count",
        "tracker",
        "tracking",
        "open",
    )

    def __init__(self, ctx: GenericContext, device: GenericDevice | None, kind: AllocKind, pool: CachingAllocator):
        rt = ctx.rt
        self.context = ctx
        self.device = device
        self.kind = kind
        self.pool = pool
        self.rt = rt
        self.registry = rt.registry
        self.lock = rt.registry.lock
        self.space = ctx.plugin.name  # the backend's name: live allocations are counted per backend
        self.exportable = kind is not _DEVICE or (device is not None and device.host_memory)
        self.max_alloc = MAX_SIZE if device is None else min((device.limits_cache or device.limits).max_alloc, MAX_SIZE)
        with rt.registry.lock:
            self.counts = live_counts(rt)
            self.count = self.counts.of(self.space)
        self.tracker = rt.tracker
        self.tracking = rt.tracker.on  # fixed for the runtime's life (PYOFFLOAD_TRACK_ALLOCATIONS)
        self.open = True

    def allocate(self, size: Any, queue: QueueCore | None = None, alignment: Any = None) -> Allocation:
        """Allocate ``size`` bytes here, usable at once or, with ``queue``, by work enqueued on it
        from now on (stream order).  With ``alignment`` (a power of two) the address is a multiple
        of it, from the pool as from a segment of its own."""
        if type(size) is not int or not 0 < size < MAX_SIZE:
            size = check_size(size)
        align = 1 if alignment is None else check_alignment(alignment)
        rt = self.rt
        if not self.open or rt.state is not LIVE:
            self.context.check_alive()
            rt.check_alive()
        if size > self.max_alloc:
            where = self.device.id if self.device is not None else self.context.backend
            raise OutOfResourcesError(
                f"alloc of {size} bytes exceeds the largest allocation of {where} ({self.max_alloc} bytes)"
            )
        lock = self.lock
        check_not_reentered(lock, "alloc")
        pool = self.pool
        need = size if align <= MIN_ALIGNMENT else size + align - 1
        alloc = Allocation.__new__(Allocation)
        alloc.size, alloc.kind, alloc.device, alloc.context = size, self.kind, self.device, self.context
        alloc.origin = origin() if self.tracking else None
        alloc.owned, alloc.owner, alloc.live = True, None, True
        alloc.pool_block, alloc.source_pool, alloc.site, alloc.users, alloc.dl_exports = None, pool, self, None, 0
        alloc.nbytes, alloc.exportable = size, self.exportable
        counts = self.counts
        count = self.count
        registry = self.registry
        clash: list[tuple[int, int, Any]] | None = None
        try:
            with lock:
                # The common case in one section: a cached block, recorded at once.
                block = pool.take_cached(need, queue)
                if block is not None:
                    alloc.pool_block = block
                    alloc.ptr = ptr = block.ptr if align == 1 else (block.ptr + align - 1) & -align
                    # A backend never hands out overlapping live blocks itself: ranges are checked
                    # for overlap only while another backend has live memory too (address spaces
                    # can coincide).
                    clash = registry.insert_locked(ptr, ptr + size, alloc, counts.total > count.live)
                    if not clash:
                        count.live += 1
                        counts.total += 1
            if block is None:
                block = pool.take(need, queue)  # a new segment, or past the pool: lock not held
                alloc.pool_block = block
                alloc.ptr = ptr = block.ptr if align == 1 else (block.ptr + align - 1) & -align
                with lock:
                    clash = registry.insert_locked(ptr, ptr + size, alloc, counts.total > count.live)
                    if not clash:
                        count.live += 1
                        counts.total += 1
            if clash:
                _place_aside(rt, alloc, pool, queue, align)
        except BaseException:
            _unregister_if_mine(rt, alloc)  # an interrupt may have come after the insert
            if alloc.pool_block is not None:
                pool.give(alloc.pool_block)
            raise
        if self.tracking:
            self.tracker.allocated(alloc)
        if _pending():
            run_deferred()
        return alloc


def site_of(ctx: GenericContext, device: GenericDevice | None, kind: Any) -> AllocSite:
    """The open allocation site of ``kind`` memory of ``device`` in ``ctx`` (checked: the device
    is the context's and has that kind; HOST memory has no device)."""
    if kind.__class__ is not AllocKind:
        check_kind(kind)
    key = (id(device), id(kind))
    site = ctx.alloc_sites.get(key)
    if site is not None and site.open:
        return site  # type: ignore[no-any-return]
    ctx.check_alive()
    ctx.rt.check_alive()
    if kind is _HOST:
        device = None
        if kind not in (ctx.devices[0].limits_cache or ctx.devices[0].limits).kinds:
            raise UnsupportedError(f"{ctx.devices[0].id} does not support HOST memory (info 'memory_kinds')")
    else:
        if device is None:
            device = ctx.devices[0]
        elif device not in ctx.devices:
            ctx.check_device(device, "alloc")
        if kind not in (device.limits_cache or device.limits).kinds:
            raise UnsupportedError(f"{device.id} does not support {kind.name} memory (info 'memory_kinds')")
    asked = key
    key = (id(device), id(kind))  # the device, or None for HOST memory
    site = ctx.alloc_sites.get(key)
    if site is None or not site.open:
        site = AllocSite(ctx, device, kind, ctx.pool(device, kind))
        ctx.add_alloc_site(key, site)
    if asked != key:  # also as asked (no device, or a device for HOST memory): found at once next time
        ctx.add_alloc_site(asked, site)
    return site


def allocate(
    ctx: GenericContext,
    device: GenericDevice | None,
    size: Any,
    kind: Any,
    queue: QueueCore | None = None,
    alignment: Any = None,
) -> Allocation:
    """Allocate ``size`` bytes of ``kind`` in ``ctx`` (on ``device`` unless HOST): see
    :meth:`AllocSite.allocate`."""
    if type(size) is not int or not 0 < size < MAX_SIZE:
        size = check_size(size)  # before the kind and the device, as every entry checks them
    return site_of(ctx, device, kind).allocate(size, queue, alignment)


def _place_aside(
    rt: Runtime, alloc: Allocation, pool: CachingAllocator, queue: QueueCore | None, align: int = 1
) -> None:
    """Two backends handed out overlapping addresses: keep colliding blocks aside (so the backend
    cannot return them again) and ask for others, as liboffload does.  On return ``alloc`` holds
    a block that is registered; on an error, the block it holds is the caller's to give back."""
    registry = rt.registry
    held: list[Block] = []
    try:
        for _ in range(_COLLISION_RETRIES):
            block = pool.take(alloc.size + (align - 1 if align > MIN_ALIGNMENT else 0), queue)
            ptr = (block.ptr + align - 1) & -align
            with registry.lock:
                if not registry.insert_locked(ptr, ptr + alloc.size, alloc, True):
                    site = alloc.site
                    assert site is not None  # owned memory has its site
                    site.count.live += 1
                    site.counts.total += 1
                    held.append(alloc.pool_block)  # type: ignore[arg-type]
                    alloc.ptr, alloc.pool_block = ptr, block
                    return
            held.append(block)
        raise OutOfResourcesError(
            f"backend {alloc.context.backend!r} keeps returning addresses that collide with live allocations"
        )
    finally:
        for aside in held:
            pool.give(aside)


def register_external(
    rt: Runtime, ptr: int, size: int, kind: AllocKind, device: GenericDevice | None, ctx: GenericContext, owner: Any
) -> Allocation:
    """Record memory pyoffload did not allocate (a global, a foreign buffer): ``mem_info``, copies
    and launches resolve it; ``free`` refuses it.  ``owner`` is kept alive while it is recorded."""
    size = check_size(size)
    alloc = Allocation.__new__(Allocation)
    alloc.ptr, alloc.size, alloc.kind, alloc.device, alloc.context = ptr, size, kind, device, ctx
    alloc.origin, alloc.owned, alloc.owner, alloc.live = None, False, owner, True
    alloc.pool_block, alloc.source_pool, alloc.site, alloc.users, alloc.dl_exports = None, None, None, None, 0
    alloc.nbytes, alloc.exportable = size, kind is not AllocKind.DEVICE or (device is not None and device.host_memory)
    try:
        clash = rt.registry.insert(ptr, ptr + size, alloc, True)
        if clash:
            raise InvalidArgumentError(
                f"memory at 0x{ptr:x}+{size} overlaps {clash[0][2]!r}, which pyoffload already knows"
            )
        return alloc
    except BaseException:
        _unregister_if_mine(rt, alloc)  # an interrupt may have come after the insert
        raise


def _unregister_if_mine(rt: Runtime, alloc: Allocation) -> None:
    """After an exception during a registration: forget ``alloc`` if it got in, and count the
    live allocations per backend again (the exception may have come between the two updates)."""
    registry = rt.registry
    with registry.lock:
        hit = registry.get(alloc.ptr)
        if hit is not None and hit[1] is alloc:
            registry.remove_locked(alloc.ptr)
        live_counts(rt).recount(registry)


def unregister(rt: Runtime, alloc: Allocation) -> None:
    """Forget ``alloc`` (freed, released or torn down): it no longer resolves or exports."""
    with rt.registry.lock:
        forgotten = _forget_locked(rt, alloc)
    if forgotten:
        _forgotten(rt, alloc)


def _forget_locked(rt: Runtime, alloc: Allocation) -> bool:
    """:func:`unregister`'s part under the registry's lock; ``False`` if it was not registered."""
    alloc.live = False
    alloc.exportable = False
    site = alloc.site
    registry = rt.registry if site is None else site.registry
    try:
        registry.remove_locked(alloc.ptr)
    except KeyError:
        return False
    if site is not None:  # owned memory: counted per backend, as allocate counts it
        site.count.live -= 1
        site.counts.total -= 1
    return True


def _forgotten(rt: Runtime, alloc: Allocation) -> None:
    """:func:`unregister`'s part after the registry's lock: the allocation tracker's record."""
    site = alloc.site
    if site is not None and site.tracking:
        site.tracker.freed_alloc(alloc)


def device_alloc(device: GenericDevice, size: Any, kind: Any, alignment: Any) -> Allocation:
    """``Device.alloc``: allocate in the device's default context, through the site it keeps."""
    sites = device.alloc_sites
    site = sites.get(id(kind))  # ids: hashing an Enum member runs Python code
    if site is None or not site.open:
        if type(size) is not int or not 0 < size < MAX_SIZE:
            size = check_size(size)  # before the kind, as every entry checks them
        site = site_of(device.default_context, device, kind)  # type: ignore[attr-defined]
        sites[id(kind)] = site
    return site.allocate(size, None, alignment)


# ------------------------------------------------------------------------------------------
# lookup
# ------------------------------------------------------------------------------------------


def _runtime_or_not_found(what: str, ptr: int) -> Runtime:
    if ptr == 0:  # as olMemFree / olGetMemInfo answer a null pointer
        raise InvalidArgumentError(f"{what}: the pointer is NULL", Errc.INVALID_NULL_POINTER)
    rt = active()
    if rt is None:
        if _runtime.was_shut_down():
            raise OffloadError(
                f"{what}: pyoffload was shut down; pointer 0x{ptr:x} belonged to that runtime", Errc.UNINITIALIZED
            )
        raise NotFoundError(f"{what}: pointer 0x{ptr:x} is not in any live allocation (pyoffload is not initialised)")
    if not rt.alive:
        raise dead_runtime_error(rt)
    return rt


def lookup(ptr: int, what: str) -> tuple[Allocation, int]:
    """The live allocation containing ``ptr`` and the offset into it; ``NOT_FOUND`` otherwise."""
    rt = _runtime_or_not_found(what, ptr)
    hit = rt.registry.find(ptr)
    if hit is None:
        raise NotFoundError(f"{what}: pointer 0x{ptr:x} is not in any live allocation{rt.tracker.history(ptr)}")
    return hit[2], ptr - hit[0]


def mem_info(ptr: Allocation | int) -> MemInfo:
    """Describe the allocation containing ``ptr`` (any address inside it, or the Allocation)."""
    if type(ptr) is int:
        rt = _runtime.CURRENT
        hit = rt.registry.find(ptr) if rt is not None and rt.state is LIVE else None
        if hit is None:
            lookup(ptr, "mem_info")  # raises the right error
            raise AssertionError("unreachable")
        a = hit[2]
        return _tuple_new(MemInfo, (a.ptr, a.size, a.kind, a.device, a.context, ptr - a.ptr, a))
    if isinstance(ptr, Allocation):
        if not ptr.live:
            raise InvalidArgumentError(f"mem_info: {ptr!r} was freed")
        return _tuple_new(MemInfo, (ptr.ptr, ptr.size, ptr.kind, ptr.device, ptr.context, 0, ptr))
    value = pointer_value(ptr)  # an int subclass or a numpy integer: an address all the same
    if value is not None:
        return mem_info(value)
    raise TypeError(f"mem_info takes an Allocation or a pointer (int), got {got(ptr)}")


def host_view(ptr: Any, size: Any, dtype: Any = np.uint8, owner: Any = None) -> np.ndarray:
    """A numpy array over the ``size`` bytes at ``ptr`` (any address inside an allocation, a
    numpy integer, or an Allocation for its start) as items of ``dtype``: a zero-copy hand-out
    of a sub-buffer, which ``memoryview()`` turns into bytes.  Host-accessible memory only
    (HOST and MANAGED on every backend, DEVICE where the device's memory is the host's).

    The array counts as an export of the allocation, as ``Allocation.view`` does: ``free``
    refuses while it lives, and it keeps the allocation and ``owner`` alive.  A range past the
    allocation's end, or a ``size`` that is not a multiple of the item size, is
    ``INVALID_SIZE``; device memory ``UNSUPPORTED``; a pointer in no allocation ``NOT_FOUND``."""
    size = check_size(size, "host_view size")
    info = mem_info(ptr)
    alloc = info.allocation
    alloc.check_host("host_view")
    dt = np.dtype(dtype)
    if dt.itemsize == 0 or size % dt.itemsize:
        raise InvalidSizeError(f"host_view: {size} bytes are not a whole number of {dt} items ({dt.itemsize} bytes)")
    if info.offset + size > alloc.size:
        raise InvalidSizeError(
            f"host_view of {size} bytes at offset {info.offset} overruns {alloc!r} ({alloc.size} bytes)"
        )
    return alloc.view(dt, size // dt.itemsize, info.offset, owner)


# ------------------------------------------------------------------------------------------
# free
# ------------------------------------------------------------------------------------------


def resolve(target: Any, what: str, kind: AllocKind | None = None) -> Allocation:
    """The owned allocation ``target`` names (an Allocation or its base pointer), checked."""
    if type(target) is Allocation:
        alloc = target
        rt = alloc.context.rt
        if rt.state is not LIVE and rt.state is not CLOSING:  # teardown frees through here too
            raise dead_runtime_error(rt)
    elif pointer_value(target) is not None:
        ptr = pointer_value(target)
        assert ptr is not None
        alloc, offset = lookup(ptr, what)
        if offset:
            raise InvalidArgumentError(
                f"{what}: pointer 0x{ptr:x} points {offset} bytes into {alloc!r}; free takes the base pointer"
            )
    elif isinstance(target, Allocation):
        alloc = target
    else:
        raise TypeError(f"{what} takes an Allocation or a pointer (int), got {got(target)}")
    if not alloc.owned:
        raise InvalidArgumentError(f"{what}: {alloc!r} is not owned by pyoffload (a global or foreign memory)")
    if kind is not None and alloc.kind is not kind:
        where = f" (allocated at {alloc.origin})" if alloc.origin else ""
        raise InvalidArgumentError(f"{what}: {alloc!r} is {alloc.kind.name} memory, not {kind.name}{where}")
    return alloc


def claim(target: Any, what: str, kind: AllocKind | None = None) -> Allocation:
    """Resolve ``target`` to a live owned allocation and mark it freed: one step under the
    registry's lock, so that a concurrent second free is a double free and an export taken
    meanwhile is either seen here or refused (see ``_claim``).  The caller releases it or, on
    failure, calls ``unclaim``."""
    alloc = resolve(target, what, kind)
    _claim(alloc, what)
    return alloc


def _claim(alloc: Allocation, what: str) -> None:
    """Mark ``alloc`` freed unless it is exported or freed already (see :func:`_claim_locked`)."""
    with alloc.context.rt.registry.lock:
        _claim_locked(alloc, what)


def _claim_locked(alloc: Allocation, what: str) -> None:
    """:func:`_claim` with the registry's lock held.

    Exports and a free meet through two fields: the buffer protocol (core/_buffer.c) counts an
    export, then checks ``exportable``; a free clears ``exportable``, then checks the count.  Each
    writes its own field before it reads the other's, so one of them sees the other: an export
    that slipped in is counted here, and one that comes later is refused.  DLPack exports count
    ``dl_exports`` under the registry's lock, as this does."""
    if not alloc.live:
        raise InvalidArgumentError(f"{what}: double free of {alloc!r}{alloc.context.rt.tracker.history(alloc.ptr)}")
    alloc.exportable = False
    if alloc.export_count or alloc.dl_exports:
        alloc.exportable = alloc.host_accessible
        raise InvalidArgumentError(
            f"{what}: {alloc!r} is still exported {alloc.exports} time(s) (memoryviews, arrays, views, DLPack); "
            "release them first"
        )
    alloc.live = False


def unclaim(alloc: Allocation) -> None:
    with alloc.context.rt.registry.lock:
        alloc.exportable = alloc.host_accessible
        alloc.live = True


def free(target: Allocation | int, kind: AllocKind | None = None) -> None:
    """Free an allocation, given the Allocation or its base pointer (of any context or backend).

    Waits for the queued operations that use it, as ``cuMemFree`` does (interrupted, the
    allocation stays allocated and a retry waits again).  Called from a host function for memory
    that later work on the host function's own queue uses, the free is deferred until that work is
    done.  ``kind``, if given, must match the allocation's kind.  Called by a finalizer that a
    garbage collection ran while this thread was inside an allocation or free, the free is
    deferred until that one is done (:mod:`pyoffload.locks`).
    """
    _free(target, kind)


def _free(target: Allocation | int, kind: AllocKind | None) -> None:
    """:func:`free`'s body (compiled, a module function may not share a name with a method of the
    extension type Allocation)."""
    site: AllocSite | None = None
    if type(target) is Allocation and kind is None:
        alloc = target
        site = alloc.site
    if site is not None:
        # pyoffload's own allocation, given as itself: no lookup
        if held_by_me(site.lock):
            defer(partial(free, target, kind))  # a partial: Cython compiles no closure in a C function
            return
        rt = site.rt
        if rt.state is not LIVE and rt.state is not CLOSING:  # teardown frees through here too
            raise dead_runtime_error(rt)
    else:
        current = _runtime.CURRENT
        if current is not None and held_by_me(current.registry.lock):
            defer(partial(free, target, kind))
            return
        alloc = resolve(target, "free", kind)
        site = alloc.site
        if site is None:  # owned memory always has its site
            raise AssertionError(f"{alloc!r} has no allocation site")
        if held_by_me(site.lock):
            defer(partial(free, alloc, kind))
            return
        rt = site.rt
    # The common case, memory no queued work uses, is one section of the registry's lock (which
    # the pool shares): claim it, forget it and return its block (``users`` is read after the
    # claim, as a waiting free reads it).
    pool = site.pool
    block = alloc.pool_block
    given = forgotten = False
    with site.lock:
        _claim_locked(alloc, "free")
        users = users_of(alloc)
        if not users:
            forgotten = _forget_locked(rt, alloc)
            if block is not None and block.segment.pooled:
                pool.give_locked(block, None, 0)
                given = True
    if users:
        try:
            if _wait_or_defer(alloc, users):
                return
        except BaseException:
            unclaim(alloc)
            raise
        release(alloc)
    else:
        if forgotten:
            _forgotten(rt, alloc)
        if block is not None and not given:
            pool.give(block)  # its own segment: back to the backend, outside the lock
        elif pool.release_threshold is not None:
            pool.keep_within_threshold()
    if _pending():
        run_deferred()


def _wait_or_defer(alloc: Allocation, users: list[tuple[QueueCore, int]]) -> bool:
    """Wait for the users of ``alloc``; ``True`` if the release had to be deferred instead."""
    running = running_host_function()
    for queue, seq in users:
        if running is not None and running[0] is queue and seq > running[1]:
            queue.after(seq, partial(release, alloc))
            return True
    for queue, seq in users:
        if queue.live:
            queue.settle(seq)
    return False


def release(alloc: Allocation, queue: QueueCore | None = None, seq: int = 0) -> None:
    """Return a claimed allocation's block to its pool (stream-ordered on ``queue`` after ``seq``)
    and forget it."""
    block, pool = alloc.pool_block, alloc.source_pool
    clear_users(alloc)
    unregister(alloc.context.rt, alloc)
    if block is not None and pool is not None:
        pool.give(block, queue, seq)
