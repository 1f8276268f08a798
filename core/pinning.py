"""Host-memory lock/unlock (pinning) through each device's pinned map, and ``is_pinned``.

``device.lock(buffer)`` makes a host buffer usable by the device and returns the device address
of its first byte; ``device.unlock(buffer)`` drops that use.  The rules of the pinned map are in
:mod:`pyoffload.addresses.pinned`.  Each lock holds the buffer's export until its unlock, so the
buffer cannot move, shrink or be closed while the device may use it; a read-only buffer can only
be locked with ``read_only=True``, and copies into such a range are refused.
"""

from __future__ import annotations

from typing import Any

from .addresses.pinned import PinnedRange
from .buffers import host_view
from .checks import pointer_value
from .device import GenericDevice
from .enums import AllocKind
from .errors import InvalidArgumentError, InvalidSizeError
from .memory import Allocation
from .runtime import LIVE, Runtime, active


def lock(device: GenericDevice, buffer: Any, read_only: bool = False) -> int:
    """Pin ``buffer`` for ``device``; return the device-accessible address of its first byte."""
    device.rt.check_alive()
    if isinstance(buffer, Allocation):
        raise InvalidArgumentError(f"lock: {buffer!r} is an allocation, not a host buffer")
    hv = host_view(buffer, "lock", writable=not read_only)
    if hv.nbytes == 0:
        raise InvalidSizeError("lock: the buffer is empty")
    addr, size = hv.address, hv.nbytes
    pins = device.pins
    with pins.lock:
        entry = pins.containing(addr, size)
        if entry is None:
            over = pins.by_host.overlapping(addr, addr + size)
            if over:
                b, e, _ = over[0]
                raise InvalidArgumentError(
                    f"lock: range 0x{addr:x}+{size} would extend the locked range 0x{b:x}+{e - b}"
                )
            entry = _external_range(device, addr, size)
            if entry is None:
                dev_ptr = device.disp.data_lock_impl(device.handle, addr, size)
                entry = PinnedRange(addr, size, int(dev_ptr), external=False, writable=not hv.readonly)
            pins.insert(entry)
        elif hv.readonly is False:
            entry.writable = True
        entry.holds.append((addr, size, hv.view))
        return entry.dev_ptr + (addr - entry.base)


def _external_range(device: GenericDevice, addr: int, size: int) -> PinnedRange | None:
    """A range already pinned by someone else (HOST memory of pyoffload, or pinned by the vendor)
    that contains ``[addr, addr + size)``."""
    hit = device.rt.registry.find(addr)
    if hit is not None and hit[2].kind is AllocKind.HOST:
        base, end, _ = hit
        found = (base, end - base, base)
    else:
        found = device.disp.data_pinned_info_impl(device.handle, addr)
        if found is None:
            return None
    base, length, dev_base = (int(v) for v in found)
    if addr + size > base + length:
        raise InvalidArgumentError(
            f"lock: range 0x{addr:x}+{size} extends beyond externally pinned memory 0x{base:x}+{length}"
        )
    return PinnedRange(base, length, dev_base, external=True)


def unlock(device: GenericDevice, buffer: Any) -> None:
    """Drop one use of the locked range holding ``buffer``; unpin it when none is left.  Unlocking
    a sub-range that was never locked by itself is an error (it does not release its enclosing
    lock)."""
    device.rt.check_alive()
    hv = host_view(buffer, "unlock", writable=False)
    addr, size = hv.address, hv.nbytes
    pins = device.pins
    with pins.lock:
        entry = pins.containing(addr, size)
        if entry is None:
            raise InvalidArgumentError(f"unlock: host range 0x{addr:x}+{size} is not locked for {device!r}")
        for i, (a, n, _) in enumerate(entry.holds):  # noqa: B007 - i: the hold deleted below
            if a == addr and n == size:
                break
        else:
            raise InvalidArgumentError(
                f"unlock: host range 0x{addr:x}+{size} was not locked itself (it lies inside the locked "
                f"range 0x{entry.base:x}+{entry.size}); unlock the buffer that was locked"
            )
        if len(entry.holds) == 1 and not entry.external:
            device.disp.data_unlock_impl(device.handle, entry.base)
        del entry.holds[i]
        if not entry.holds:
            pins.remove(entry)


def _host_address(ptr: Any) -> int:
    value = pointer_value(ptr)
    if value is not None:
        return value
    hv = host_view(ptr, "is_pinned", writable=False)
    return hv.address


def is_pinned(ptr: Any) -> bool:
    """Whether a host address (or buffer) lies in memory pinned for any device, HOST memory
    allocated through pyoffload included."""
    rt = active()
    if rt is None or rt.state is not LIVE:
        return False
    addr = _host_address(ptr)
    if find_pinned(rt, addr) is not None:
        return True
    hit = rt.registry.find(addr)
    return hit is not None and hit[2].kind is AllocKind.HOST


def find_pinned(rt: Runtime, addr: int, device_addresses: bool = False) -> tuple[int, int, bool] | None:
    """``(host address, bytes left in the range, writable)`` if ``addr`` lies in host memory
    pinned for any device.  With ``device_addresses``, a device address returned by ``lock`` is
    accepted too and translated to the host address it maps (the two differ on some drivers)."""
    for device in rt.devices:
        pins = device.pins
        if not pins:
            continue
        hit = pins.by_host.find(addr)
        if hit is not None:
            return addr, hit[1] - addr, hit[2].writable
        if device_addresses:
            hit = pins.by_dev.find(addr)
            if hit is not None:
                entry = hit[2]
                return entry.base + (addr - hit[0]), hit[1] - addr, entry.writable
    return None


def device_pointer(device: GenericDevice, addr: int) -> int | None:
    """If ``addr`` is a device address of a range pinned for ``device``: the bytes left in it."""
    pins = device.pins
    if not pins:
        return None
    hit = pins.by_dev.find(addr)
    return hit[1] - addr if hit is not None else None
