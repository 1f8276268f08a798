"""The fake driver's address space: every allocation it handed out, live or freed.

Device memory lives at fake addresses above 2**48, where no host mapping can be, one 2**40 window
per device, so an address says which device owns it.  It is backed by anonymous ``mmap`` memory
(zero pages cost nothing until touched) and cannot be dereferenced by the host, like real VRAM.
Pinned host memory (``hipHostMalloc``) and managed memory (``hipMallocManaged``) are real host
memory, handed out at their real addresses because the host reads them directly.  Registered host
ranges (``hipHostRegister``) are device-visible at their host address, as ROCm maps them on
Linux; a fake made with ``separate_register_alias=True`` hands out a distinct device alias
instead (what ``hsa_amd_memory_lock`` may return elsewhere), to prove that callers use the
pointer ``hipHostGetDevicePointer`` returns.

Freed regions are kept (their memory too, so that the host allocator cannot reuse the address):
any later use is reported as use-after-free instead of silently reading someone else's data.
"""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import enum
import mmap
from typing import Any

from .types import FakePointer

DEVICE_BASE = 1 << 48
DEVICE_WINDOW = 1 << 40
ALIAS_BASE = 1 << 47 | 1 << 48 | 1 << 49  # registered-host aliases: above every device window
_GUARD = 4096  # gap between fake allocations so that an overrun lands nowhere


class Fault(Exception):
    """A misuse of memory found by the fake; ``err`` is what the driver call returns."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(message)
        self.err = err


class Kind(enum.Enum):
    DEVICE = "device"  # hipMalloc / hipMallocAsync
    HOST = "host"  # hipHostMalloc
    MANAGED = "managed"  # hipMallocManaged
    ALIAS = "registered"  # device alias of a hipHostRegister'ed range
    MODULE = "module"  # a loaded module's globals


@dataclasses.dataclass(eq=False)
class Region:
    base: int
    size: int
    kind: Kind
    device: int | None  # owning device; None for memory every device reaches
    label: str
    host_address: int  # real address of the backing bytes
    keepalive: Any = None  # the mmap (or the user's memory for aliases: None)
    freed: bool = False
    stream_ordered: bool = False

    @property
    def end(self) -> int:
        return self.base + self.size

    def view(self, offset: int, size: int) -> memoryview:
        return memoryview((ctypes.c_char * size).from_address(self.host_address + offset)).cast("B")


def _mmap(size: int) -> tuple[mmap.mmap, int]:
    mem = mmap.mmap(-1, max(size, 1))
    anchor = ctypes.c_char.from_buffer(mem)  # pins the mapping and gives its address
    return mem, ctypes.addressof(anchor)


class AddressSpace:
    """All regions by base address; lookups find the region containing an address."""

    def __init__(self, device_count: int, memory_per_device: int) -> None:
        self._bases: list[int] = []
        self._regions: list[Region] = []
        self._next = {d: DEVICE_BASE + d * DEVICE_WINDOW for d in range(device_count)}
        self._next_alias = ALIAS_BASE
        self.capacity = memory_per_device
        self.used = dict.fromkeys(range(device_count), 0)

    # -- bookkeeping ----------------------------------------------------------------------

    def _insert(self, region: Region) -> Region:
        index = bisect.bisect(self._bases, region.base)
        self._bases.insert(index, region.base)
        self._regions.insert(index, region)
        return region

    def find(self, address: int) -> Region | None:
        """The region containing ``address``, live or freed (regions never overlap: fake
        addresses are never reused and freed host memory stays mapped)."""
        index = bisect.bisect(self._bases, address) - 1
        if index < 0:
            return None
        region = self._regions[index]
        return region if region.base <= address < max(region.end, region.base + 1) else None

    def live(self) -> list[Region]:
        return [r for r in self._regions if not r.freed]

    # -- allocation -----------------------------------------------------------------------

    def allocate_device(self, device: int, size: int, label: str, kind: Kind = Kind.DEVICE) -> Region:
        if self.used[device] + size > self.capacity:
            raise Fault(2, f"device {device} is out of memory ({size} bytes requested)")
        mem, address = _mmap(size)
        base = self._next[device]
        self._next[device] = base + (size + _GUARD + 255) // 256 * 256
        self.used[device] += size
        return self._insert(Region(base, size, kind, device, label, address, mem))

    def allocate_host(self, size: int, kind: Kind, label: str) -> Region:
        mem, address = _mmap(size)
        return self._insert(Region(address, size, kind, None, label, address, mem))

    def alias_host(self, host_address: int, size: int, label: str, separate: bool) -> Region:
        """The device view of a registered host range: the host address itself (ROCm on Linux
        maps user memory at the same virtual address) or, with ``separate``, a distinct alias."""
        base = host_address
        if separate:
            base = self._next_alias
            self._next_alias = base + (size + _GUARD + 4095) // 4096 * 4096
        return self._insert(Region(base, size, Kind.ALIAS, None, label, host_address))

    def release(self, region: Region) -> None:
        region.freed = True
        if region.device is not None and region.kind in (Kind.DEVICE, Kind.MODULE):
            self.used[region.device] -= region.size

    # -- access ---------------------------------------------------------------------------

    def device_view(
        self, address: int, size: int, device: int | None, peers: set[tuple[int, int]], what: str
    ) -> memoryview:
        """Bytes ``[address, address + size)`` as device ``device`` (None: a copy engine) sees them.

        Raises :class:`Fault` for unknown, freed, out-of-bounds or unreachable memory.
        """
        region = self.find(address)
        if region is None:
            raise Fault(700 if device is not None else 1, f"{what}: 0x{address:x} is not device-accessible memory")
        if region.freed:
            raise Fault(
                700 if device is not None else 1, f"{what}: use after free of {region.label} at 0x{region.base:x}"
            )
        offset = address - region.base
        if offset + size > region.size:
            raise Fault(
                700 if device is not None else 1,
                f"{what}: {size} bytes at 0x{address:x} overrun {region.label} "
                f"(0x{region.base:x}, {region.size} bytes)",
            )
        if (
            device is not None
            and region.device is not None
            and region.device != device
            and (device, region.device) not in peers
        ):
            raise Fault(
                700, f"{what}: device {device} accessed device {region.device}'s {region.label} without peer access"
            )
        return region.view(offset, size)

    def host_view(self, pointer: Any, size: int, what: str, writable: bool) -> memoryview:
        """Host memory for the host side of a copy: a buffer object or a real address."""
        if isinstance(pointer, (int, FakePointer)):
            address = int(pointer)
            if address == 0:
                raise Fault(1, f"{what}: null host pointer")
            region = self.find(address)
            if region is not None and region.freed and region.kind in (Kind.HOST, Kind.MANAGED):
                raise Fault(1, f"{what}: use after free of {region.label} at 0x{region.base:x}")
            if address >= DEVICE_BASE:
                raise Fault(1, f"{what}: 0x{address:x} is device memory, not host memory")
            return memoryview((ctypes.c_char * size).from_address(address)).cast("B")
        view = memoryview(pointer).cast("B")
        if view.nbytes < size:
            raise Fault(1, f"{what}: host buffer has {view.nbytes} bytes, {size} requested")
        if writable and view.readonly:
            raise Fault(1, f"{what}: host buffer is read-only")
        return view[:size]
