"""A map of non-overlapping address ranges with O(log n) lookup of any address inside one.

Both the allocation registry and the pinned-host-memory map are such maps: allocations never
overlap, and a pinned range nested in another is a second user of the outer range, not an entry.
Not synchronised: callers hold their own lock around compound operations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from sortedcontainers import SortedList

V = TypeVar("V")


class IntervalMap(Generic[V]):
    __slots__ = ("_bases", "_entries")

    def __init__(self) -> None:
        self._bases: SortedList = SortedList()
        self._entries: dict[int, tuple[int, V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[tuple[int, int, V]]:
        for base in list(self._bases):
            end, value = self._entries[base]
            yield base, end, value

    def find(self, addr: int) -> tuple[int, int, V] | None:
        """The entry ``[base, end)`` containing ``addr``, or ``None``."""
        hit = self._entries.get(addr)
        if hit is not None:  # the common case: a base address
            return addr, hit[0], hit[1]
        i = self._bases.bisect_right(addr) - 1
        if i < 0:
            return None
        base = self._bases[i]
        end, value = self._entries[base]
        return (base, end, value) if addr < end else None

    def overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        """Entries that intersect ``[base, end)``."""
        found = []
        i = max(self._bases.bisect_right(base) - 1, 0)
        while i < len(self._bases):
            b = self._bases[i]
            if b >= end:
                break
            e, value = self._entries[b]
            if e > base:
                found.append((b, e, value))
            i += 1
        return found

    def insert(self, base: int, end: int, value: V) -> None:
        """Add ``[base, end)``; the caller has checked it overlaps nothing."""
        self._entries[base] = (end, value)
        self._bases.add(base)

    def remove(self, base: int) -> V:
        end, value = self._entries.pop(base)
        self._bases.remove(base)
        return value

    def clear(self) -> None:
        self._bases.clear()
        self._entries.clear()
