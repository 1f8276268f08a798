"""Host-memory lock/unlock: the per-device pinned-allocation map (LLVM's PinnedAllocationMapTy).

* Locking a range fully inside a locked range adds a user and returns the offset device pointer.
* A range that partially overlaps a locked one (it would extend it) is an error.
* A range is unlocked, through ``data_unlock_impl``, when its last user unlocks it.
* Memory the vendor already pinned (``data_pinned_info_impl``) or that pyoffload allocated as HOST
  memory is recorded as externally locked: it gets users like any range but is never unlocked here.
* Locked buffers are held (a strong reference per user) so they cannot be collected under the
  device.  Lookups are O(log n) in the number of locked ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import runtime as _runtime
from .enums import AllocKind
from .errors import InvalidArgumentError, InvalidSizeError
from .intervals import IntervalMap
from .memory import Allocation, _buffer_address

if TYPE_CHECKING:
    from .device import Device
    from .runtime import Runtime


class PinnedRange:
    __slots__ = ("base", "size", "dev_ptr", "users", "external", "holds")

    def __init__(self, base: int, size: int, dev_ptr: int, external: bool) -> None:
        self.base = base
        self.size = size
        self.dev_ptr = dev_ptr
        self.users = 0
        self.external = external
        self.holds: list[Any] = []

    def __repr__(self) -> str:
        how = "external" if self.external else "locked"
        return f"<PinnedRange 0x{self.base:x}+{self.size} {how} users={self.users}>"


class PinnedMap:
    """The locked host ranges of one device, indexed by host address and by device address."""

    def __init__(self) -> None:
        self.by_host: IntervalMap[PinnedRange] = IntervalMap()
        self.by_dev: IntervalMap[PinnedRange] = IntervalMap()

    def insert(self, entry: PinnedRange) -> None:
        self.by_host.insert(entry.base, entry.base + entry.size, entry)
        self.by_dev.insert(entry.dev_ptr, entry.dev_ptr + entry.size, entry)

    def remove(self, entry: PinnedRange) -> None:
        self.by_host.remove(entry.base)
        self.by_dev.remove(entry.dev_ptr)


def _pins(device: Device) -> PinnedMap:
    pins = device.__dict__.get("_pins")
    if pins is None:
        pins = device.__dict__.setdefault("_pins", PinnedMap())
    return pins


def _host_range(buffer: Any, what: str) -> tuple[int, int]:
    if isinstance(buffer, Allocation):
        raise InvalidArgumentError(f"{what}: {buffer!r} is an allocation, not a host buffer")
    try:
        mv = memoryview(buffer)
    except TypeError:
        raise InvalidArgumentError(f"{what}: expected a host buffer (buffer protocol), got {type(buffer).__name__}") from None
    if not mv.c_contiguous:
        raise InvalidArgumentError(f"{what}: buffer must be C-contiguous")
    if mv.nbytes == 0:
        raise InvalidSizeError(f"{what}: buffer is empty")
    return _buffer_address(mv), mv.nbytes


def lock(device: Device, buffer: Any) -> int:
    """Pin ``buffer`` for ``device``; return the device-accessible address of its first byte."""
    rt = device._rt
    rt.check_alive()
    addr, size = _host_range(buffer, "lock")
    pins = _pins(device)
    with rt.lock:
        entry = _containing(pins, addr, size)
        if entry is None:
            over = pins.by_host.overlapping(addr, addr + size)
            if over:
                b, e, _ = over[0]
                raise InvalidArgumentError(
                    f"lock: range 0x{addr:x}+{size} would extend the locked range 0x{b:x}+{e - b}"
                )
            entry = _external_range(device, addr, size)
            if entry is None:
                dev_ptr = device._disp.data_lock_impl(device.handle, addr, size)
                entry = PinnedRange(addr, size, int(dev_ptr), external=False)
            pins.insert(entry)
        entry.users += 1
        entry.holds.append(buffer)
        return entry.dev_ptr + (addr - entry.base)


def _containing(pins: PinnedMap, addr: int, size: int) -> PinnedRange | None:
    """The locked range that holds all of ``[addr, addr + size)``, if any."""
    hit = pins.by_host.find(addr)
    return hit[2] if hit is not None and addr + size <= hit[1] else None


def _external_range(device: Device, addr: int, size: int) -> PinnedRange | None:
    """A range already pinned by someone else that contains ``[addr, addr + size)``."""
    hit = device._rt.registry.find(addr)
    if hit is not None and hit[2].kind is AllocKind.HOST:
        base, end, _ = hit
        found = (base, end - base, base)
    else:
        found = device._disp.data_pinned_info_impl(device.handle, addr)
        if found is None:
            return None
        base = found[0]
        end = base + found[1]
    if addr + size > base + found[1]:
        raise InvalidArgumentError(
            f"lock: range 0x{addr:x}+{size} extends beyond externally pinned memory 0x{base:x}+{found[1]}"
        )
    return PinnedRange(base, found[1], found[2], external=True)


def unlock(device: Device, buffer: Any) -> None:
    """Drop one user of the locked range holding ``buffer``; unpin it when none is left."""
    rt = device._rt
    rt.check_alive()
    addr, size = _host_range(buffer, "unlock")
    pins = _pins(device)
    with rt.lock:
        entry = _containing(pins, addr, size)
        if entry is None:
            raise InvalidArgumentError(f"unlock: host range 0x{addr:x}+{size} is not locked for {device!r}")
        if entry.users == 1 and not entry.external:
            device._disp.data_unlock_impl(device.handle, entry.base)
        entry.users -= 1
        for i, held in enumerate(entry.holds):
            if held is buffer:
                del entry.holds[i]
                break
        else:
            entry.holds.pop()
        if entry.users == 0:
            pins.remove(entry)


def is_pinned(ptr: Any) -> bool:
    """Whether a host address (or buffer) lies in memory pinned for any device, HOST memory
    allocated through pyoffload included."""
    rt = _runtime.current()
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        addr = ptr
    else:
        addr, _ = _host_range(ptr, "is_pinned")
    if find_pinned(rt, addr) is not None:
        return True
    hit = rt.registry.find(addr)
    return hit is not None and hit[2].kind is AllocKind.HOST


def find_pinned(rt: Runtime, addr: int, device_addresses: bool = False) -> tuple[int, int] | None:
    """``(host address, bytes left in the range)`` if ``addr`` lies in host memory pinned for any
    device.  With ``device_addresses``, a device address returned by ``lock`` is accepted too and
    translated to the host address it maps (the two differ on some drivers)."""
    for device in rt.devices:
        pins = device.__dict__.get("_pins")
        if pins is None:
            continue
        hit = pins.by_host.find(addr)
        if hit is not None:
            return addr, hit[1] - addr
        if device_addresses:
            hit = pins.by_dev.find(addr)
            if hit is not None:
                return hit[2].base + (addr - hit[0]), hit[1] - addr
    return None


def device_pointer(device: Device, addr: int) -> tuple[int, int] | None:
    """If ``addr`` is a device address of a range pinned for ``device``: ``(addr, bytes left)``."""
    pins = device.__dict__.get("_pins")
    if pins is None:
        return None
    hit = pins.by_dev.find(addr)
    return (addr, hit[1] - addr) if hit is not None else None


def release_all(rt: Runtime, warn: Callable[[str, BaseException], None]) -> None:
    for device in rt.devices:
        pins: PinnedMap | None = device.__dict__.pop("_pins", None)
        if pins is None:
            continue
        for _, _, entry in list(pins.by_host):
            if not entry.external:
                try:
                    device._disp.data_unlock_impl(device.handle, entry.base)
                except BaseException as exc:
                    warn(f"unlocking {entry!r}", exc)
