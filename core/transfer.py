"""Copies and fills between any two of: host buffers, allocations of any kind and backend, pointers
into them, pinned host memory, and program globals; plus managed-memory hints.

One path per operation: each copy or fill is an operation on a queue.  With ``queue=None`` it runs
on the internal queue of the context that owns the memory, and the call waits for it; with a queue
it is ordered there and returns its :class:`~pyoffload.Event`.  How a copy is carried out:

* host memory on both sides (host buffers, HOST/MANAGED memory, the host backend's memory):
  ``memmove`` — at once without a queue, or as a host function on the given queue;
* a device on one side and host memory on the other: ``data_submit_impl`` / ``data_retrieve_impl``;
* two devices of one backend with a direct path (``memory_connection``): ``data_exchange_impl``;
* anything else (two backends, no direct path, overlapping ranges the backend cannot copy):
  staged through a bounded host buffer, chunk by chunk.

A copy or fill without a queue first waits for the queued work that uses its memory (as a free
does), so it never races a queued operation on the same bytes.  A queue orders the copy when it
belongs to the context of the memory it touches (it runs the
copy itself) or to another backend (the copy then runs as a host function on it: later work on the
queue waits for it, the caller does not).  A queue of the same backend but another context is an
``INVALID_ARGUMENT`` error: the copy could not be ordered there.  Every allocation a queued copy or
fill touches records the operation as a user, and host buffers are held until it completes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from .buffers import HostView, host_view, view_at
from .context import GenericContext
from .device import GenericDevice
from .enums import AllocKind, MemAdvice, MemoryConnection
from .errors import Errc, InvalidArgumentError, InvalidSizeError, NotFoundError, UnsupportedError, got
from .checks import check_size
from .memory import Allocation
from .pinning import find_pinned
from .queue_core import QueueCore, record_user, users_of
from .runtime import LIVE, active, dead_runtime_error

STAGING_CHUNK = 8 << 20
_memmove = ctypes.memmove


class End:
    """One side of a copy or fill: host memory (``hv`` or ``host_ok``) and/or memory of a device.

    Made with ``End.__new__`` and only the fields that differ from these defaults set: it is
    built twice per copy, on a path counted in frames."""

    addr = 0
    avail = 0
    hv: HostView | None = None
    alloc: Allocation | None = None
    device: GenericDevice | None = None
    ctx: GenericContext | None = None
    host_ok = False
    writable = True


_new_end = _new_hv = object.__new__
_ndarray, _memoryview, _addressof, _c_char = np.ndarray, memoryview, ctypes.addressof, ctypes.c_char


def resolve(obj: Any, role: str, writable: bool) -> End:
    """What ``obj`` (an Allocation, a pointer, a global, a host buffer) names, checked."""
    end = _new_end(End)
    t = type(obj)
    if t is Allocation:
        if not obj.live:
            raise InvalidArgumentError(f"{role}: {obj!r} was freed")
        if obj.context.rt.state is not LIVE:
            raise dead_runtime_error(obj.context.rt)
        alloc, offset = obj, 0
    elif t is _ndarray and obj.size and obj.flags.writeable and obj.flags.c_contiguous and not obj.dtype.hasobject:
        # host_view's answer for the common host buffer, without its frame: the address of a
        # writable array through ctypes (``__array_interface__`` builds a dict; ~0.6 µs more).
        mv = _memoryview(obj if obj.ndim == 1 and obj.itemsize == 1 else obj.reshape(-1).view(np.uint8))
        end.hv = hv = _new_hv(HostView)
        hv.view, hv.address, hv.nbytes, hv.readonly = mv, _addressof(_c_char.from_buffer(mv)), mv.nbytes, False
        end.addr, end.avail, end.host_ok = hv.address, hv.nbytes, True
        return end
    elif t is int or isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        # A numpy integer scalar where an address is expected is an address (as an int is), not
        # a host buffer of its own eight bytes.
        ptr = int(obj)
        if ptr == 0:  # as olMemcpy / urEnqueueUSMMemcpy / urEnqueueUSMFill answer a null pointer
            raise InvalidArgumentError(f"{role}: the pointer is NULL", Errc.INVALID_NULL_POINTER)
        rt = active()
        if rt is None or rt.state is not LIVE:
            if rt is not None:
                raise dead_runtime_error(rt)
            raise NotFoundError(f"{role}: pointer 0x{ptr:x} is not in any allocation (pyoffload is not initialised)")
        hit = rt.registry.find(ptr)
        if hit is None:
            pinned = find_pinned(rt, ptr, device_addresses=True)
            if pinned is None:
                raise NotFoundError(
                    f"{role}: pointer 0x{ptr:x} is neither in a live allocation nor in pinned host memory"
                    f"{rt.tracker.history(ptr)}"
                )
            end.addr, end.avail, end.writable = pinned
            if writable and not end.writable:
                raise InvalidArgumentError(f"{role}: pointer 0x{ptr:x} is in host memory locked read-only")
            end.host_ok = True
            return end
        alloc, offset = hit[2], ptr - hit[0]
    elif isinstance(obj, Allocation):
        return resolve(obj.ptr if obj.live else obj, role, writable)
    elif hasattr(obj, "allocation") and type(getattr(obj, "allocation", None)) is Allocation:
        alloc, offset = obj.allocation, 0  # a program's global variable
        if not alloc.live:
            raise InvalidArgumentError(f"{role}: {obj!r} belongs to a program that was unloaded")
    else:
        end.hv = hv = host_view(obj, role, writable)
        end.addr, end.avail, end.host_ok = hv.address, hv.nbytes, True
        return end
    if writable and alloc.readonly:
        raise InvalidArgumentError(f"{role}: {alloc!r} is read-only memory (its producer exported it read-only)")
    end.alloc = alloc
    end.addr = alloc.ptr + offset
    end.avail = alloc.size - offset
    end.ctx = alloc.context
    dev = alloc.device
    end.device = dev if dev is not None else alloc.context.devices[0]
    end.host_ok = alloc.kind is not AllocKind.DEVICE or end.device.host_memory
    return end


def _host(end: End, size: int) -> memoryview:
    hv = end.hv
    return hv.view[:size] if hv is not None else view_at(end.addr, size)


def _wait_for_users(*ends: End) -> None:
    """Before a synchronous operation: let queued work on the same memory finish first."""
    for end in ends:
        alloc = end.alloc
        if alloc is not None and alloc.users:
            for queue, seq in users_of(alloc):
                if seq > queue.done and queue.live:
                    queue.wait_done(seq)


def _record_use(end: End, queue: QueueCore, seq: int) -> None:
    alloc = end.alloc
    if alloc is not None:  # external memory too: a program's unload waits for users of its globals
        record_user(alloc, queue, seq)


def _check_queue(queue: Any, d: End, s: End | None, what: str) -> bool:
    """Whether ``queue`` runs the work itself (``False``: it orders it as a host function)."""
    if not isinstance(queue, QueueCore):
        raise TypeError(f"{what}: queue must be a pyoffload.Queue, got {got(queue)}")
    queue.check_live()
    ctxs = [e.ctx for e in (d, s) if e is not None and e.ctx is not None]
    qctx = queue.context
    if any(c is qctx for c in ctxs):
        return True
    if any(c.platform.plugin is queue.device.plugin for c in ctxs):
        names = " and ".join(repr(c) for c in ctxs)
        raise InvalidArgumentError(f"{what}: {queue!r} belongs to {qctx!r}, not to {names}: it cannot order this work")
    return not ctxs and queue.device.host_memory


# ------------------------------------------------------------------------------------------
# memcpy
# ------------------------------------------------------------------------------------------


def memcpy(dst: Any, src: Any, size: Any = None, queue: QueueCore | None = None) -> Any:
    """Copy ``size`` bytes from ``src`` to ``dst``.  Without a size the two sides (from each
    address to the end of its memory) must be the same size: ``INVALID_SIZE`` otherwise.

    Without a queue the copy has completed when this returns.  With a queue it is ordered there
    and an Event is returned; host buffers are kept alive until it completes.  Overlapping ranges
    copy as ``memmove`` does.  A size of 0 does nothing.
    """
    d = resolve(dst, "memcpy dst", True)
    s = resolve(src, "memcpy src", False)
    if size is None:
        # No size: both sides must be the same size, as numpy's and CuPy's copies demand equal
        # shapes; copying the smaller of two unequal sides would hide a caller's mistake.
        if d.avail != s.avail:
            raise InvalidSizeError(
                f"memcpy without a size between dst of {d.avail} bytes and src of {s.avail} bytes: "
                "give the size, or make the sizes match"
            )
        size = d.avail
    elif type(size) is not int or size <= 0:
        size = check_size(size, "memcpy size", allow_zero=True)
    if size > s.avail:
        raise InvalidSizeError(f"memcpy size {size} reads past the end of src ({s.avail} bytes available)")
    if size > d.avail:
        raise InvalidSizeError(f"memcpy size {size} writes past the end of dst ({d.avail} bytes available)")
    if queue is None:
        if size:
            if d.alloc is not None and d.alloc.users or s.alloc is not None and s.alloc.users:
                _wait_for_users(d, s)
            if d.host_ok and s.host_ok:  # _copy_now, inline: the synchronous copy's path
                _memmove(d.addr, s.addr, size)
            else:
                owner = d if not d.host_ok else s
                ctx = owner.ctx
                assert ctx is not None
                q = ctx.internal_queues.get(id(owner.device)) or ctx.internal_queue(owner.device)
                if _copy_on(q, d, s, size, now=True) is None:
                    _staged(d, s, size)
        return None
    native = _check_queue(queue, d, s, "memcpy")
    if not size:
        return queue.event_for(0)  # type: ignore[attr-defined]
    if native and not (d.host_ok and s.host_ok and not queue.device.host_memory):
        seq = _copy_on(queue, d, s, size)
        if seq is not None:
            return queue.event_for(seq)  # type: ignore[attr-defined]
    return _as_host_function(queue, lambda: _copy_now(d, s, size), d, s)


def _as_host_function(queue: QueueCore, work: Callable[[], None], *ends: End) -> Any:
    """Order ``work`` on ``queue`` as a host function (the queue cannot run it itself): later
    work waits for it, the caller does not; the memory it touches records it as a user."""
    seq = queue.host_function(work)
    for end in ends:
        _record_use(end, queue, seq)
    holds = tuple(e.hv.view for e in ends if e.hv is not None)
    if holds:
        queue.hold(seq, holds)
    return queue.event_for(seq)  # type: ignore[attr-defined]


def _overlap(d: End, s: End, size: int) -> bool:
    return d.alloc is not None and d.alloc is s.alloc and d.addr < s.addr + size and s.addr < d.addr + size


def _direct(d: End, s: End) -> bool:
    """Whether ``data_exchange_impl`` can copy between the two device ends."""
    if d.device is None or s.device is None or d.ctx is None or s.ctx is None:
        return False
    if d.device.plugin is not s.device.plugin:
        return False
    return s.ctx.connection(s.device, d.ctx, d.device) is not MemoryConnection.NONE


def _copy_on(queue: QueueCore, d: End, s: End, size: int, now: bool = False) -> int | None:
    """Enqueue the copy on ``queue``, which belongs to a context of the memory; ``None`` when it
    has to be staged (the caller then runs it as a host function, or stages it).  With ``now``
    (the synchronous copy) it is waited for too: one enqueue hook call and one queue
    synchronisation (``QueueCore.run_now``), no driver event."""
    hold: Any = None
    args: tuple[Any, ...]
    direct = False
    if d.device is not None and s.device is not None and not _overlap(d, s, size) and _direct(d, s):
        direct = True
        hook, args = "data_exchange_impl", (s.device.handle, s.addr, d.device.handle, d.addr, size, queue.handle)
    elif d.device is not None and s.host_ok and not d.host_ok:
        if queue.device.plugin is not d.device.plugin:
            return None
        hold = s.hv.view[:size] if s.hv is not None else view_at(s.addr, size)
        hook, args = "data_submit_impl", (queue.dh, queue.handle, d.addr, hold, size)
    elif s.device is not None and d.host_ok and not s.host_ok:
        if queue.device.plugin is not s.device.plugin:
            return None
        hold = d.hv.view[:size] if d.hv is not None else view_at(d.addr, size)
        hook, args = "data_retrieve_impl", (queue.dh, queue.handle, hold, s.addr, size)
    elif d.host_ok and s.host_ok:
        dev = queue.device
        hook, args = "data_exchange_impl", (dev.handle, s.addr, dev.handle, d.addr, size, queue.handle)
        hold = tuple(e.hv.view for e in (d, s) if e.hv is not None) or None
    else:
        return None
    try:
        if now:
            seq = queue.run_now(hook, args, hold, (d.alloc, s.alloc))
            if seq is not None:
                return seq
        seq = queue.enqueue(hook, args, hold, not now)
    except UnsupportedError:
        if direct:
            return None  # no direct path after all (or overlapping ranges): staged
        raise
    for end in (d, s):
        if end.alloc is not None:
            record_user(end.alloc, queue, seq)
    if now and seq > queue.done:
        queue.wait_until(seq)
    return seq


def _copy_now(d: End, s: End, size: int) -> None:
    """The synchronous copy: ``memmove`` between host memory, else an operation on the owning
    context's internal queue and a wait for it, else staged through host memory."""
    if d.host_ok and s.host_ok:
        _memmove(d.addr, s.addr, size)
        return
    owner = d if not d.host_ok else s
    assert owner.ctx is not None and owner.device is not None
    queue = owner.ctx.internal_queues.get(id(owner.device)) or owner.ctx.internal_queue(owner.device)
    if _copy_on(queue, d, s, size, now=True) is None:
        _staged(d, s, size)


def _staged(d: End, s: End, size: int) -> None:
    """Copy through a bounded host buffer, chunk by chunk, so that any size fits in host memory
    (and overlapping ranges copy as ``memmove`` does: each chunk is read before it is written,
    in the direction that never overwrites unread bytes)."""
    chunk = min(size, STAGING_CHUNK)
    staging = bytearray(chunk)
    offsets = range(0, size, chunk)
    if _overlap(d, s, size) and d.addr > s.addr:
        offsets = range((size - 1) // chunk * chunk, -1, -chunk)
    for off in offsets:
        n = min(chunk, size - off)
        part = memoryview(staging)[:n]
        _copy_now(_host_end(part), _sub(s, off), n)
        _copy_now(_sub(d, off), _host_end(part), n)


def _sub(end: End, offset: int) -> End:
    out = _new_end(End)
    out.addr, out.avail = end.addr + offset, end.avail - offset
    out.alloc, out.device, out.ctx, out.host_ok, out.writable = (
        end.alloc,
        end.device,
        end.ctx,
        end.host_ok,
        end.writable,
    )
    if end.hv is not None:
        out.hv = HostView(end.hv.view[offset:], end.hv.address + offset, end.hv.readonly)
    return out


def _host_end(view: memoryview) -> End:
    end = _new_end(End)
    end.hv = HostView(view, ctypes.addressof(ctypes.c_char.from_buffer(view)), False)
    end.addr, end.avail, end.host_ok = end.hv.address, view.nbytes, True
    return end


# ------------------------------------------------------------------------------------------
# memfill
# ------------------------------------------------------------------------------------------


def pattern_bytes(pattern: Any) -> bytes:
    """The fill pattern as bytes: a bytes-like object or a numpy scalar of any width."""
    if isinstance(pattern, (bytes, bytearray, memoryview)):
        data = bytes(pattern)
    elif isinstance(pattern, np.generic):
        if pattern.dtype.hasobject:
            raise InvalidArgumentError(f"memfill pattern must be plain data, got {pattern!r}")
        data = pattern.tobytes()
    else:
        raise TypeError(f"memfill pattern must be bytes or a numpy scalar (e.g. numpy.uint32(7)), got {got(pattern)}")
    if not data:
        raise InvalidSizeError("memfill pattern is empty")
    return data


def narrowed(pattern: bytes) -> bytes:
    """The shortest unit whose repetition is ``pattern`` (``b"\\xab" * 8`` -> ``b"\\xab"``)."""
    n = len(pattern)
    for width in range(1, n):
        if n % width == 0 and pattern[:width] * (n // width) == pattern:
            return pattern[:width]
    return pattern


def memfill(ptr: Any, pattern: Any, size: Any = None, queue: QueueCore | None = None) -> Any:
    """Fill ``size`` bytes at ``ptr`` with ``pattern`` repeated; ``size`` must be a multiple of the
    pattern's length and defaults to the rest of the memory (rounded down to whole patterns)."""
    pat = pattern_bytes(pattern)
    end = resolve(ptr, "memfill dst", True)
    if size is None:
        size = end.avail - end.avail % len(pat)
    else:
        size = check_size(size, "memfill size", allow_zero=True)
    if size % len(pat):
        raise InvalidSizeError(f"memfill size {size} is not a multiple of the pattern length {len(pat)}")
    if size > end.avail:
        raise InvalidSizeError(f"memfill size {size} writes past the end of dst ({end.avail} bytes available)")
    pat = narrowed(pat)
    if queue is None:
        if size:
            if end.alloc is not None and end.alloc.users:
                _wait_for_users(end)
            _fill_now(end, pat, size)
        return None
    native = _check_queue(queue, end, None, "memfill")
    if not size:
        return queue.event_for(0)  # type: ignore[attr-defined]
    if native and end.device is not None and not end.device.host_memory:
        try:
            seq = queue.enqueue(
                "data_fill_impl",
                (queue.dh, queue.handle, end.addr, pat, size),
                fallback=lambda: _fill_now(end, pat, size),
            )
            _record_use(end, queue, seq)
            return queue.event_for(seq)  # type: ignore[attr-defined]
        except UnsupportedError:
            pass
    return _as_host_function(queue, lambda: _fill_now(end, pat, size), end)


def _host_fill(dst: memoryview, pat: bytes) -> None:
    arr = np.frombuffer(dst, dtype=np.uint8)
    n = len(pat)
    if n in (1, 2, 4, 8) and len(arr) % n == 0:
        arr.view(f"u{n}").fill(np.frombuffer(pat, dtype=f"u{n}")[0])
    else:
        arr.reshape(-1, n)[:] = np.frombuffer(pat, dtype=np.uint8)


def _fill_now(end: End, pat: bytes, size: int) -> None:
    if end.host_ok:
        _host_fill(_host(end, size), pat)
        return
    assert end.ctx is not None and end.device is not None
    queue = end.ctx.internal_queue(end.device)
    try:
        seq = queue.enqueue("data_fill_impl", (queue.dh, queue.handle, end.addr, pat, size))
    except UnsupportedError:
        # A pattern the device cannot fill natively: write the expanded pattern in chunks.
        chunk = max(len(pat), STAGING_CHUNK - STAGING_CHUNK % len(pat))
        block = bytearray(min(chunk, size))
        _host_fill(memoryview(block), pat)
        for off in range(0, size, len(block)):
            n = min(len(block), size - off)
            _copy_now(_sub(end, off), _host_end(memoryview(block)[:n]), n)
        return
    _record_use(end, queue, seq)
    queue.wait_until(seq)


# ------------------------------------------------------------------------------------------
# managed-memory hints
# ------------------------------------------------------------------------------------------


def prefetch(ptr: Any, size: Any, to: GenericDevice | None = None, queue: QueueCore | None = None) -> Any:
    """Migrate a MANAGED range to device ``to`` (``None``: to the host).  A hint: memory that is
    not MANAGED is left alone, as in liboffload."""
    size = check_size(size)
    end = resolve(ptr, "prefetch ptr", False)
    if size > end.avail:
        raise InvalidSizeError(f"prefetch size {size} reaches past the end of the memory ({end.avail} bytes)")
    managed = end.alloc is not None and end.alloc.kind is AllocKind.MANAGED
    dev = to if to is not None else end.device
    if queue is not None:
        _check_queue(queue, end, None, "prefetch")
        if not managed or dev is None or queue.device.plugin is not dev.plugin:
            return queue.event_for(0)  # type: ignore[attr-defined]
        seq = queue.enqueue("data_prefetch_impl", (dev.handle, queue.handle, end.addr, size, to is not None))
        _record_use(end, queue, seq)
        return queue.event_for(seq)  # type: ignore[attr-defined]
    if managed and dev is not None and end.ctx is not None:
        internal = end.ctx.internal_queue(dev)
        seq = internal.enqueue("data_prefetch_impl", (dev.handle, internal.handle, end.addr, size, to is not None))
        internal.wait_until(seq)
    return None


def advise(ptr: Any, size: Any, advice: MemAdvice, device: GenericDevice | None = None) -> None:
    """Give a usage hint for a MANAGED range; ignored for other memory."""
    if not isinstance(advice, MemAdvice):
        raise TypeError(f"advice must be a pyoffload.MemAdvice, got {advice!r}")
    size = check_size(size)
    end = resolve(ptr, "advise ptr", False)
    if size > end.avail:
        raise InvalidSizeError(f"advise size {size} reaches past the end of the memory ({end.avail} bytes)")
    if end.alloc is None or end.alloc.kind is not AllocKind.MANAGED:
        return
    dev = device or end.device
    assert dev is not None
    dev.disp.data_advise_impl(dev.handle, end.addr, size, advice)
