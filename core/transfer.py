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
import functools
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
# 2D and 3D copies and fills
# ------------------------------------------------------------------------------------------


class Rect:
    """The geometry of a 2D or 3D copy: ``depth`` slices of ``height`` rows of ``width`` bytes,
    each side with its row pitch and slice pitch (both in bytes), counted from the region's
    first byte (the origin is already applied to the ends)."""

    __slots__ = ("width", "height", "depth", "dst_pitch", "dst_slice", "src_pitch", "src_slice")

    def __init__(
        self, width: int, height: int, depth: int, dst_pitch: int, dst_slice: int, src_pitch: int, src_slice: int
    ) -> None:
        self.width, self.height, self.depth = width, height, depth
        self.dst_pitch, self.dst_slice, self.src_pitch, self.src_slice = dst_pitch, dst_slice, src_pitch, src_slice

    def rows(self) -> list[tuple[int, int]]:
        """Each row's (dst offset, src offset) from the region's first byte, in order."""
        return [
            (z * self.dst_slice + y * self.dst_pitch, z * self.src_slice + y * self.src_pitch)
            for z in range(self.depth)
            for y in range(self.height)
        ]


def _extent(pitch: int, slice_pitch: int, width: int, height: int, depth: int) -> int:
    """Bytes from a region's first byte to one past its last: the last row's end."""
    return (depth - 1) * slice_pitch + (height - 1) * pitch + width


def _origin(value: Any, what: str) -> tuple[int, int, int]:
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{what} must be a tuple (x in bytes, y in rows, z in slices), got {got(value)}")
    if len(value) != 3:
        raise InvalidArgumentError(f"{what} must have 3 entries (x in bytes, y in rows, z in slices), got {value!r}")
    x, y, z = (check_size(v, f"{what}[{i}]", allow_zero=True) for i, v in enumerate(value))
    return x, y, z


def _place(
    end: End, what: str, side: str, origin: tuple[int, int, int], pitch: int, slice_pitch: int, rect: tuple[int, ...]
) -> End:
    """Check one side's layout against the region and its memory; the side moved to the
    region's first byte.  The one check of a 2D or 3D layout (copies and fills)."""
    width, height, depth = rect
    if pitch < width:
        raise InvalidSizeError(f"{what} {side} pitch {pitch} is less than the width {width}")
    x, y, z = origin
    if x + width > pitch:
        raise InvalidSizeError(f"{what} {side} origin x {x} + width {width} is more than the {side} pitch {pitch}")
    if depth > 1 or z:
        if slice_pitch < pitch * height:
            raise InvalidSizeError(
                f"{what} {side} slice pitch {slice_pitch} is less than height {height} x {side} pitch {pitch}"
            )
        if slice_pitch % pitch:
            raise InvalidSizeError(f"{what} {side} slice pitch {slice_pitch} is not a multiple of its pitch {pitch}")
        if y + height > slice_pitch // pitch:
            raise InvalidSizeError(
                f"{what} {side} origin y {y} + height {height} is more than the {slice_pitch // pitch} rows of a slice"
            )
    first = z * slice_pitch + y * pitch + x
    last = first + _extent(pitch, slice_pitch, width, height, depth)
    if last > end.avail:
        verb = "reads" if side == "src" else "writes"
        raise InvalidSizeError(
            f"{what} {verb} past the end of {side}: the region ends {last} bytes from the {side} pointer, "
            f"{end.avail} bytes available"
        )
    return _sub(end, first) if first else end


def _rows_overlap(d: End, s: End, r: Rect) -> bool:
    """Whether a byte of the dst region is also a byte of the src region (same memory only):
    rows of one may lie in the gaps between rows of the other, which is no overlap."""
    if d.alloc is not s.alloc or (d.alloc is None and not (d.host_ok and s.host_ok)):
        return False
    d_len = _extent(r.dst_pitch, r.dst_slice, r.width, r.height, r.depth)
    s_len = _extent(r.src_pitch, r.src_slice, r.width, r.height, r.depth)
    if d.addr >= s.addr + s_len or s.addr >= d.addr + d_len:
        return False
    w = r.width
    spans = sorted(
        [(d.addr + do, 0) for do, _ in r.rows()] + [(s.addr + so, 1) for _, so in r.rows()],
    )
    reach = [-1, -1]  # the furthest end of a dst row and of a src row seen so far
    for lo, side in spans:
        if lo < reach[1 - side]:
            return True
        reach[side] = max(reach[side], lo + w)
    return False


def memcpy_2d(
    dst: Any, dst_pitch: Any, src: Any, src_pitch: Any, width: Any, height: Any, queue: QueueCore | None = None
) -> Any:
    """Copy ``height`` rows of ``width`` bytes from ``src`` to ``dst``; row ``i`` starts
    ``i * src_pitch`` bytes after ``src`` and ``i * dst_pitch`` bytes after ``dst`` (UR's
    ``urEnqueueUSMMemcpy2D``, CUDA's ``cuMemcpy2DAsync``: the parameters in that order).  An
    offset into the memory is a pointer into it (``alloc.ptr + offset``) or a slice of a host
    buffer.  Without a queue the copy has completed when this returns; with one it is ordered
    there as one operation and its Event is returned."""
    return _copy_rect(
        "memcpy_2d", dst, src, (width, height, 1), dst_pitch, None, src_pitch, None, None, None, queue, flat=True
    )


def memcpy_3d(
    dst: Any,
    src: Any,
    region: Any,
    *,
    dst_pitch: Any,
    dst_slice_pitch: Any,
    src_pitch: Any,
    src_slice_pitch: Any,
    dst_origin: Any = (0, 0, 0),
    src_origin: Any = (0, 0, 0),
    queue: QueueCore | None = None,
) -> Any:
    """Copy a box of ``region = (width in bytes, height in rows, depth in slices)`` from ``src`` to
    ``dst``, each side laid out with its row pitch and slice pitch in bytes and starting at its
    origin ``(x in bytes, y in rows, z in slices)`` (UR's ``urEnqueueMemBufferCopyRect``,
    OpenCL's ``clEnqueueCopyBufferRect``, CUDA's ``cuMemcpy3DAsync`` with ``srcHeight = slice
    pitch / pitch``).  A slice pitch must be a multiple of its pitch and hold the region's rows
    from the origin on; the two regions must not overlap.  Queued and synchronous as
    :func:`memcpy_2d`."""
    return _copy_rect(
        "memcpy_3d",
        dst,
        src,
        region,
        dst_pitch,
        dst_slice_pitch,
        src_pitch,
        src_slice_pitch,
        dst_origin,
        src_origin,
        queue,
    )


def _copy_rect(
    what: str,
    dst: Any,
    src: Any,
    region: Any,
    dst_pitch: Any,
    dst_slice_pitch: Any,
    src_pitch: Any,
    src_slice_pitch: Any,
    dst_origin: Any,
    src_origin: Any,
    queue: QueueCore | None,
    flat: bool = False,
) -> Any:
    """``memcpy_2d`` and ``memcpy_3d``, named ``what`` in errors.  ``flat`` (``memcpy_2d``): one
    slice from each pointer, the slice pitches and origins unused."""
    if not isinstance(region, (tuple, list)):
        raise TypeError(f"{what} region must be a tuple (width in bytes, height, depth), got {got(region)}")
    if len(region) != 3:
        raise InvalidArgumentError(f"{what} region must have 3 entries (width in bytes, height, depth), got {region!r}")
    width = check_size(region[0], f"{what} width")
    height = check_size(region[1], f"{what} height")
    depth = check_size(region[2], f"{what} depth")
    dp = check_size(dst_pitch, f"{what} dst pitch")
    sp = check_size(src_pitch, f"{what} src pitch")
    # A 2D copy has one slice: its slice pitch is the rows it spans (never used as a stride).
    ds = dp * height if flat else check_size(dst_slice_pitch, f"{what} dst slice pitch")
    ss = sp * height if flat else check_size(src_slice_pitch, f"{what} src slice pitch")
    d_origin = (0, 0, 0) if flat else _origin(dst_origin, f"{what} dst_origin")
    s_origin = (0, 0, 0) if flat else _origin(src_origin, f"{what} src_origin")
    d = resolve(dst, f"{what} dst", True)
    s = resolve(src, f"{what} src", False)
    shape = (width, height, depth)
    d = _place(d, what, "dst", d_origin, dp, ds, shape)
    s = _place(s, what, "src", s_origin, sp, ss, shape)
    r = Rect(width, height, depth, dp, ds, sp, ss)
    if _rows_overlap(d, s, r):
        raise InvalidArgumentError(f"{what}: the src and dst regions overlap (a byte of one is a byte of the other)")
    if queue is None:
        if d.alloc is not None and d.alloc.users or s.alloc is not None and s.alloc.users:
            _wait_for_users(d, s)
        _rect_now(d, s, r)
        return None
    native = _check_queue(queue, d, s, what)
    if native and not (d.host_ok and s.host_ok):
        seq, done = _rect_on(queue, d, s, r)
        if done == height * depth:
            return queue.event_for(seq)  # type: ignore[attr-defined]
        rest = r.rows()[done:]
        return _as_host_function(queue, lambda: _rows_now(d, s, rest, width), d, s)
    return _as_host_function(queue, lambda: _rect_now(d, s, r), d, s)


def _rect_side(queue: QueueCore, end: End, size: int) -> Any:
    """One side as ``memcpy_rect_impl`` takes it: an address of memory of the queue's device or
    a view of host memory (``size`` bytes); ``None`` otherwise (memory of another device goes
    row by row, through ``data_exchange_impl`` and its connection rules)."""
    if end.host_ok:
        return _host(end, size)
    if end.device is queue.device and end.ctx is queue.context:
        return end.addr
    return None


def _rect_on(queue: QueueCore, d: End, s: End, r: Rect) -> tuple[int, int]:
    """Enqueue the copy on ``queue`` (of a context of the memory): in one ``memcpy_rect_impl``
    where the backend has it, else row by row through the 1-D copy (``_copy_on``).  Returns the
    last operation's sequence number and how many rows were enqueued (all, or those before the
    first row that has to be staged: the caller does the rest on the host)."""
    if not queue.device.host_memory and not (d.host_ok and s.host_ok):
        dst = _rect_side(queue, d, _extent(r.dst_pitch, r.dst_slice, r.width, r.height, r.depth))
        src = _rect_side(queue, s, _extent(r.src_pitch, r.src_slice, r.width, r.height, r.depth))
        if dst is not None and src is not None:
            hold = tuple(v for v in (dst, src) if type(v) is not int) or None
            args = (queue.dh, queue.handle, dst, r.dst_pitch, r.dst_slice, src, r.src_pitch, r.src_slice)
            try:
                seq = queue.enqueue(
                    "memcpy_rect_impl",
                    (*args, r.width, r.height, r.depth),
                    hold,
                    fallback=lambda: _rect_now(d, s, r),
                )
            except UnsupportedError:
                pass  # no driver call for it: row by row
            else:
                _record_use(d, queue, seq)
                _record_use(s, queue, seq)
                return seq, r.height * r.depth
    seq = 0
    rows = r.rows()
    for i, (do, so) in enumerate(rows):
        got_seq = _copy_on(queue, _sub(d, do), _sub(s, so), r.width)
        if got_seq is None:
            return seq, i
        seq = got_seq
    return seq, len(rows)


def _rect_now(d: End, s: End, r: Rect) -> None:
    """The synchronous copy: ``memmove`` row by row between host memory, else enqueued on the
    owning context's internal queue and waited for once (rows that need staging after that)."""
    if d.host_ok and s.host_ok:
        _rows_now(d, s, r.rows(), r.width)
        return
    owner = d if not d.host_ok else s
    assert owner.ctx is not None and owner.device is not None
    queue = owner.ctx.internal_queue(owner.device)
    seq, done = _rect_on(queue, d, s, r)
    if seq:
        queue.wait_until(seq)
    _rows_now(d, s, r.rows()[done:], r.width)


def _rows_now(d: End, s: End, rows: list[tuple[int, int]], width: int) -> None:
    """Copy the given rows one by one, synchronously."""
    if d.host_ok and s.host_ok:
        for do, so in rows:
            _memmove(d.addr + do, s.addr + so, width)
        return
    for do, so in rows:
        _copy_now(_sub(d, do), _sub(s, so), width)


def memfill_2d(ptr: Any, pitch: Any, pattern: Any, width: Any, height: Any, queue: QueueCore | None = None) -> Any:
    """Fill ``height`` rows of ``width`` bytes, row ``i`` starting ``i * pitch`` bytes after
    ``ptr``, with ``pattern`` repeated (UR's ``urEnqueueUSMFill2D``, CUDA's
    ``cuMemsetD2D8/16/32Async``); ``width`` must be a multiple of the pattern's length.  Queued
    and synchronous as :func:`memcpy_2d`."""
    pat = pattern_bytes(pattern)
    w = check_size(width, "memfill_2d width")
    h = check_size(height, "memfill_2d height")
    p = check_size(pitch, "memfill_2d pitch")
    if w % len(pat):
        raise InvalidSizeError(f"memfill_2d width {w} is not a multiple of the pattern length {len(pat)}")
    end = _place(resolve(ptr, "memfill_2d dst", True), "memfill_2d", "dst", (0, 0, 0), p, p * h, (w, h, 1))
    pat = narrowed(pat)
    if queue is None:
        if end.alloc is not None and end.alloc.users:
            _wait_for_users(end)
        _fill_rect_now(end, pat, p, w, h)
        return None
    native = _check_queue(queue, end, None, "memfill_2d")
    if native and end.device is not None and not end.device.host_memory:
        seq, done = _fill_rect_on(queue, end, pat, p, w, h)
        if done == h:
            return queue.event_for(seq)  # type: ignore[attr-defined]
        rest = _sub(end, done * p)
        return _as_host_function(queue, lambda: _fill_rect_now(rest, pat, p, w, h - done), end)
    return _as_host_function(queue, lambda: _fill_rect_now(end, pat, p, w, h), end)


def _fill_rect_on(queue: QueueCore, end: End, pat: bytes, pitch: int, width: int, height: int) -> tuple[int, int]:
    """Enqueue the fill on ``queue`` (of the memory's context): one ``memfill_rect_impl`` where
    the backend has it, else row by row with ``data_fill_impl``.  Returns the last operation's
    sequence number and how many rows were enqueued (the rest the caller fills on the host)."""
    try:
        seq = queue.enqueue(
            "memfill_rect_impl",
            (queue.dh, queue.handle, end.addr, pitch, pat, width, height),
            fallback=lambda: _fill_rect_now(end, pat, pitch, width, height),
        )
    except UnsupportedError:
        pass  # no driver call for this pattern or layout: row by row
    else:
        _record_use(end, queue, seq)
        return seq, height
    seq = 0
    for i in range(height):
        row = _sub(end, i * pitch)
        try:
            seq = queue.enqueue(
                "data_fill_impl",
                (queue.dh, queue.handle, row.addr, pat, width),
                fallback=functools.partial(_fill_now, row, pat, width),
            )
        except UnsupportedError:
            return seq, i
        _record_use(end, queue, seq)
    return seq, height


def _fill_rect_now(end: End, pat: bytes, pitch: int, width: int, height: int) -> None:
    """The synchronous fill: on the host row by row, else enqueued on the internal queue of the
    memory's context and waited for once (rows the device cannot fill after that)."""
    if end.host_ok:
        for i in range(height):
            _host_fill(_host(_sub(end, i * pitch), width), pat)
        return
    assert end.ctx is not None and end.device is not None
    queue = end.ctx.internal_queue(end.device)
    seq, done = _fill_rect_on(queue, end, pat, pitch, width, height)
    if seq:
        queue.wait_until(seq)
    for i in range(done, height):
        _fill_now(_sub(end, i * pitch), pat, width)


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
