"""Hooks: allocation, transfers, fills, pinning, managed-memory hints and memory connections."""

from __future__ import annotations

from typing import Any

from ..enums import AllocKind, MemAdvice, MemoryConnection
from .marker import hookspec


@hookspec(firstresult=True)
def data_alloc_impl(context: Any, device: Any, size: int, kind: AllocKind) -> int:
    """Allocate ``size`` bytes of ``kind`` memory and return its address as an ``int``.

    ``device`` is ``None`` for :attr:`AllocKind.HOST` (pinned host memory owned by the context,
    reachable from all its devices).  HOST and MANAGED memory must be readable and writable by the
    host at the returned address.  The caching allocator of the generic layer sits in front of
    this hook: it asks for large segments and splits them, so a backend sees few, large calls.

    Errors: ``OutOfResourcesError`` when memory is exhausted (the allocator then releases its
    cache and retries once); ``UnsupportedError`` when the device cannot provide that kind.
    May block.

    Example::

        @hookimpl
        def data_alloc_impl(context, device, size, kind):
            if kind is AllocKind.DEVICE:
                return int(driver.mem_alloc(size))
            raise UnsupportedError(f"{kind.name} memory is not supported")
    """


@hookspec(firstresult=True)
def data_free_impl(context: Any, device: Any, ptr: int, kind: AllocKind) -> None:
    """Release memory that ``data_alloc_impl`` returned for the same context, device and kind.

    The generic layer calls it only once no queued operation can still use the memory.  May block
    (as ``cuMemFree`` does).  Example::

        @hookimpl
        def data_free_impl(context, device, ptr, kind):
            driver.mem_free(ptr)
    """


@hookspec(firstresult=True)
def data_alloc_async_impl(context: Any, device: Any, queue: Any, size: int, kind: AllocKind) -> int | None:
    """*Optional.* Stream-ordered allocation (``cuMemAllocAsync``, ``hipMallocAsync``): return an
    address usable by work enqueued on ``queue`` after this call.

    Used by ``Queue.alloc_async`` only where the generic caching allocator is off for that device
    and kind (it already reuses memory in queue order).  Return ``None`` when the backend has no
    stream-ordered allocator for this kind: the generic layer then allocates with
    ``data_alloc_impl``.  Must not block.  The default returns ``None``.
    """


@hookspec(firstresult=True)
def data_free_async_impl(context: Any, device: Any, queue: Any, ptr: int, kind: AllocKind) -> bool | None:
    """*Optional.* Stream-ordered free of memory that ``data_alloc_async_impl`` returned: the memory
    is released once the work enqueued on ``queue`` before this call has completed.

    Return ``True`` when done so; ``None`` when ``ptr`` did not come from the stream-ordered
    allocator (the generic layer then frees it with ``data_free_impl`` once the queue has passed
    this point).  Must not block.  The default returns ``None``.
    """


@hookspec(firstresult=True)
def data_submit_impl(device: Any, queue: Any, dst: int, src: memoryview, size: int) -> None:
    """Enqueue a copy of ``size`` bytes from the host buffer ``src`` (a C-contiguous, one-byte
    format view of at least ``size`` bytes) to the device address ``dst``.

    The generic layer keeps ``src`` alive and unchanged until the copy has completed.  Must not
    block; see the package docstring for how failures are reported.  Example::

        @hookimpl
        def data_submit_impl(device, queue, dst, src, size):
            driver.memcpy_htod_async(dst, src[:size], queue.stream)
    """


@hookspec(firstresult=True)
def data_retrieve_impl(device: Any, queue: Any, dst: memoryview, src: int, size: int) -> None:
    """Enqueue a copy of ``size`` bytes from the device address ``src`` into the writable host view
    ``dst`` (C-contiguous, one-byte format).  ``dst`` is kept alive until the copy completes.
    Must not block.  Example::

        @hookimpl
        def data_retrieve_impl(device, queue, dst, src, size):
            driver.memcpy_dtoh_async(dst[:size], src, queue.stream)
    """


@hookspec(firstresult=True)
def data_exchange_impl(src_device: Any, src: int, dst_device: Any, dst: int, size: int, queue: Any) -> None:
    """Enqueue a copy of ``size`` bytes between two addresses of this backend, possibly on two
    devices; ``queue`` belongs to the same context and is on one of the two devices.

    Called only for pairs that ``memory_connection_impl`` answered MIGRATABLE or UNIFIED for; the
    two ranges may overlap (inside one allocation), and the copy must then behave as ``memmove``.
    Raise ``UnsupportedError`` when this pair has no direct path after all (or the ranges overlap
    and the driver cannot copy overlapping ranges): the generic layer then stages the copy through
    host memory.  Must not block.
    """


@hookspec(firstresult=True)
def data_fill_impl(device: Any, queue: Any, ptr: int, pattern: bytes, size: int) -> None:
    """Enqueue a fill of ``size`` bytes at ``ptr`` with ``pattern`` repeated.

    The generic layer has narrowed ``pattern`` to its shortest repeating unit (a fill with
    ``b"\\xab" * 8`` arrives as ``b"\\xab"``) and checked that ``size`` is a multiple of its length.
    Raise ``UnsupportedError`` for a pattern length or alignment the device cannot fill: the
    generic layer then writes the expanded pattern with ``data_submit_impl``.  Must not block.

    Example::

        @hookimpl
        def data_fill_impl(device, queue, ptr, pattern, size):
            if len(pattern) != 1:
                raise UnsupportedError("byte fills only")
            driver.memset_d8_async(ptr, pattern[0], size, queue.stream)
    """


@hookspec(firstresult=True)
def memcpy_rect_impl(
    device: Any,
    queue: Any,
    dst: int | memoryview,
    dst_pitch: int,
    dst_slice_pitch: int,
    src: int | memoryview,
    src_pitch: int,
    src_slice_pitch: int,
    width: int,
    height: int,
    depth: int,
) -> None:
    """*Optional.* (Hook API 1.2.)  Enqueue a copy of ``depth`` slices of ``height`` rows of
    ``width`` bytes: row ``y`` of slice ``z`` starts ``z * slice_pitch + y * pitch`` bytes after
    ``dst`` and ``src`` (``cuMemcpy3DAsync`` with ``srcHeight = src_slice_pitch // src_pitch``;
    ``cuMemcpy2DAsync`` when ``depth`` is 1).

    Each side is an ``int``, an address of memory of ``device`` in ``queue``'s context, or a
    ``memoryview`` of host memory spanning the region from its first byte to its last (kept
    alive and unchanged until the copy completes); at least one side is an address.  Copies
    between two devices go row by row through ``data_exchange_impl``, never here.  The generic layer
    has checked the layout: positive sizes, each pitch at least ``width``, each slice pitch a
    multiple of its pitch and at least ``height`` times it, both regions inside their memory,
    and no byte in both regions.  Raise ``UnsupportedError`` where the driver has no such call
    for this pair or layout: the generic layer then copies row by row with the 1-D hooks, on the
    same queue.  Must not block.  The default raises ``UnsupportedError``.
    """


@hookspec(firstresult=True)
def memfill_rect_impl(device: Any, queue: Any, ptr: int, pitch: int, pattern: bytes, width: int, height: int) -> None:
    """*Optional.* (Hook API 1.2.)  Enqueue a fill of ``height`` rows of ``width`` bytes, row ``y``
    starting ``y * pitch`` bytes after the device address ``ptr``, with ``pattern`` repeated
    (``cuMemsetD2D8/16/32Async``).

    ``pattern`` is narrowed as for ``data_fill_impl``; ``width`` is a multiple of its length and
    at most ``pitch``; the region lies inside one allocation.  Raise ``UnsupportedError`` for a
    pattern or layout the driver cannot fill: the generic layer then fills row by row with
    ``data_fill_impl``.  Must not block.  The default raises ``UnsupportedError``.
    """


@hookspec(firstresult=True)
def data_lock_impl(device: Any, ptr: int, size: int) -> int:
    """*Optional.* Pin (page-lock) the host range ``[ptr, ptr + size)`` for ``device`` and return the
    device-accessible address of ``ptr``.

    Called only for a range that is not locked yet: the generic pinned map handles nested locks,
    reference counts and ranges the vendor pinned already.  The generic layer holds the buffer's
    export until the range is unlocked, so the memory cannot move or be freed meanwhile.  The
    default raises ``UnsupportedError`` (the device cannot use host memory it did not allocate).
    May block.  Example (CUDA)::

        @hookimpl
        def data_lock_impl(device, ptr, size):
            libcuda.cuMemHostRegister(ptr, size, DEVICEMAP | PORTABLE)
            return libcuda.cuMemHostGetDevicePointer(ptr)
    """


@hookspec(firstresult=True)
def data_unlock_impl(device: Any, ptr: int) -> None:
    """*Optional.* Unpin a range that ``data_lock_impl`` pinned at host address ``ptr``.

    Called once, when its last user unlocks it (or at shutdown); never for memory pinned by the
    vendor or allocated as HOST memory.  The default does nothing.  May block.
    """


@hookspec(firstresult=True)
def data_pinned_info_impl(device: Any, ptr: int) -> tuple[int, int, int] | None:
    """*Optional.* Is host address ``ptr`` already pinned by the vendor (not through pyoffload)?

    Return ``(base, size, device_address_of_base)`` for the pinned range containing ``ptr``, or
    ``None``.  The generic layer records such a range as externally locked and never unlocks it.
    The default answers ``None``.
    """


@hookspec(firstresult=True)
def data_prefetch_impl(device: Any, queue: Any, ptr: int, size: int, to_device: bool) -> None:
    """*Optional.* Enqueue a migration of a MANAGED range to ``device`` (``to_device``) or to the
    host.  A hint: the generic layer calls it only for MANAGED memory.  The default does nothing.
    Must not block.
    """


@hookspec(firstresult=True)
def data_advise_impl(device: Any, ptr: int, size: int, advice: MemAdvice) -> None:
    """*Optional.* Apply a usage hint to a MANAGED range (only called for MANAGED memory).  The
    default ignores it."""


@hookspec(firstresult=True)
def memory_connection_impl(context_a: Any, device_a: Any, context_b: Any, device_b: Any) -> MemoryConnection | None:
    """*Optional.* How memory of ``(context_a, device_a)`` reaches ``(context_b, device_b)``, both
    of this backend, possibly of two platforms (``device_*`` is ``None`` for the HOST memory of
    that context).

    Return UNIFIED if a pointer of one side is usable on the other (kernels and copies),
    MIGRATABLE if ``data_exchange_impl`` can copy directly, NONE if copies must be staged through
    host memory, or ``None`` for the generic answer: UNIFIED within one device of one context and
    for HOST memory of the same context, MIGRATABLE between two devices of one context, NONE across
    contexts.  Asked once per pair and cached by the generic layer for the contexts' lifetime, so
    a backend may enable peer access here.  The conformance suite accepts any answer a backend can
    back up with working copies and launches.
    """
