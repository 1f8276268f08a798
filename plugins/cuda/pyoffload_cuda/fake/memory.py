"""The fake driver's memory: device addresses in reserved, inaccessible address space, backed
by host bytes, plus the host ranges the driver has pinned or mapped.

Device addresses come from a range reserved with ``mmap(PROT_NONE)``: no host allocation can
ever land there, so a device pointer can never alias host memory, and a host dereference of a
device pointer faults as it would on real hardware.  Addresses are never reused within a
process, so any access through a freed pointer is recognised as a use after free.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import dataclasses
import mmap
import threading
import traceback
from typing import Any

RESERVED_BYTES = 1 << 38  # 256 GiB of address space (PROT_NONE, no memory behind it)
DEVICE_ALIGN = 512  # cuMemAlloc guarantees 256
GUARD = 4096  # gap after every allocation: small overruns land in no allocation


class _AddressSpace:
    """One process-wide reservation with a bump pointer (addresses are never reused)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000)
        base = libc.mmap(None, RESERVED_BYTES, 0, flags, -1, 0)  # PROT_NONE
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "fake CUDA driver: cannot reserve device address space")
        self.base = int(base)
        self.end = self.base + RESERVED_BYTES
        self._next = self.base + (1 << 20)

    def take(self, size: int) -> int:
        with self._lock:
            addr = -(-self._next // DEVICE_ALIGN) * DEVICE_ALIGN
            if addr + size + GUARD > self.end:
                raise MemoryError("fake CUDA driver: device address space exhausted")
            self._next = addr + size + GUARD
            return addr

    def contains(self, addr: int) -> bool:
        return self.base <= addr < self.end


_space: _AddressSpace | None = None
_space_lock = threading.Lock()


def address_space() -> _AddressSpace:
    global _space
    with _space_lock:
        if _space is None:
            _space = _AddressSpace()
        return _space


@dataclasses.dataclass(eq=False)
class Region:
    """One allocation or pinned host range the driver knows about.

    ``kind`` is ``device``, ``global`` (a module variable), ``host`` (cuMemHostAlloc),
    ``managed`` (cuMemAllocManaged) or ``registered`` (cuMemHostRegister).  Device memory is
    backed by ``data``; the other kinds are real host memory at ``base``.
    """

    base: int
    size: int
    kind: str
    context: Any  # the FakeContext that made it
    data: bytearray | None = None
    keepalive: Any = None
    freed: bool = False
    freed_by: str = ""

    @property
    def on_device(self) -> bool:
        return self.data is not None

    def describe(self) -> str:
        return f"{self.kind} allocation 0x{self.base:x}+{self.size} of {self.context!r}"


class Access(Exception):
    """A bad pointer: ``kind`` is one of use-after-free, out-of-bounds, unknown-pointer,
    wrong-context."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MemoryMap:
    """Live regions by base address, plus the freed ones (for use-after-free reports)."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._live: dict[int, Region] = {}
        self._freed: dict[int, Region] = {}
        self._freed_bases: list[int] = []

    def add(self, region: Region) -> None:
        if self.find_live(region.base, region.size) is not None:
            raise Access("overlap", f"0x{region.base:x}+{region.size} overlaps a live region")
        bisect.insort(self._bases, region.base)
        self._live[region.base] = region

    def remove(self, region: Region) -> None:
        region.freed = True
        region.freed_by = "".join(traceback.format_stack(limit=8)[:-2])
        del self._live[region.base]
        self._bases.remove(region.base)
        if region.base not in self._freed:
            bisect.insort(self._freed_bases, region.base)
        self._freed[region.base] = region

    def live(self) -> list[Region]:
        return list(self._live.values())

    def find_live(self, addr: int, size: int = 1) -> Region | None:
        """The live region overlapping ``[addr, addr + size)``, if any."""
        i = bisect.bisect_right(self._bases, addr + max(size, 1) - 1) - 1
        if i >= 0:
            r = self._live[self._bases[i]]
            if r.base + r.size > addr:
                return r
        return None

    def _find_freed(self, addr: int) -> Region | None:
        i = bisect.bisect_right(self._freed_bases, addr) - 1
        if i >= 0:
            r = self._freed[self._freed_bases[i]]
            if addr < r.base + r.size:
                return r
        return None

    def resolve(self, addr: int, size: int) -> tuple[Region, int]:
        """The live region holding all of ``[addr, addr + size)`` and the offset of ``addr``."""
        r = self.find_live(addr)
        if r is None:
            freed = self._find_freed(addr)
            if freed is not None:
                raise Access("use-after-free", f"0x{addr:x} lies in {freed.describe()}, which was freed")
            raise Access("unknown-pointer", f"0x{addr:x} is not in any allocation")
        if addr + size > r.base + r.size:
            raise Access("out-of-bounds", f"0x{addr:x}+{size} runs past the end of {r.describe()}")
        return r, addr - r.base


def region_view(region: Region, offset: int, size: int) -> memoryview:
    """A writable byte view of ``size`` bytes at ``offset`` in the region."""
    if region.data is not None:
        return memoryview(region.data)[offset : offset + size]
    if size == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * size).from_address(region.base + offset)).cast("B")
