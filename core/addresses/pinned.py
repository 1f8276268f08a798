"""The pinned-host-memory map of one device (LLVM's ``PinnedAllocationMapTy``).

* Locking a range fully inside a locked range adds a user and returns the offset device pointer.
* A range that partially overlaps a locked one (it would extend it) is refused.
* A range is unlocked when its last user unlocks it.
* Memory the vendor pinned already, or that pyoffload allocated as HOST memory, is recorded as
  externally locked: it gets users like any range but is never unlocked by pyoffload.
* Each user holds the buffer's export (a ``memoryview``) until it unlocks, so the buffer can
  neither be collected, resized nor closed while the device may use it.

The map is indexed both by host address and by device address (the two differ on some drivers).
Compound updates hold ``lock``; the pinning operations in :mod:`pyoffload.pinning` take it.
"""

from __future__ import annotations

import threading
from typing import Any

from .intervals import RangeMap


class PinnedRange:
    """One locked host range: its users and the exports they hold."""

    __slots__ = ("base", "size", "dev_ptr", "external", "holds", "writable")

    def __init__(self, base: int, size: int, dev_ptr: int, external: bool, writable: bool = True) -> None:
        self.base = base
        self.size = size
        self.dev_ptr = dev_ptr
        self.external = external
        self.writable = writable  # False while every user locked a read-only buffer
        self.holds: list[tuple[int, int, Any]] = []  # (address, size, export) per user

    @property
    def users(self) -> int:
        return len(self.holds)

    def __repr__(self) -> str:
        how = "external" if self.external else "locked"
        return f"<PinnedRange 0x{self.base:x}+{self.size} {how} users={self.users}>"


class PinnedMap:
    """The locked host ranges of one device."""

    __slots__ = ("by_host", "by_dev", "lock")

    def __init__(self) -> None:
        self.by_host: RangeMap = RangeMap()
        self.by_dev: RangeMap = RangeMap()
        self.lock = threading.RLock()

    def __len__(self) -> int:
        return len(self.by_host)

    def containing(self, addr: int, size: int) -> PinnedRange | None:
        """The locked range that holds all of ``[addr, addr + size)``, if any."""
        hit = self.by_host.find(addr)
        return hit[2] if hit is not None and addr + size <= hit[1] else None

    def insert(self, entry: PinnedRange) -> None:
        self.by_host.insert(entry.base, entry.base + entry.size, entry, check=False)
        self.by_dev.insert(entry.dev_ptr, entry.dev_ptr + entry.size, entry, check=False)

    def remove(self, entry: PinnedRange) -> None:
        self.by_host.remove(entry.base)
        self.by_dev.remove(entry.dev_ptr)

    def entries(self) -> list[PinnedRange]:
        return [entry for _, _, entry in self.by_host.items()]

    def reset_locks(self) -> None:
        self.lock = threading.RLock()
        self.by_host.reset_lock()
        self.by_dev.reset_lock()
