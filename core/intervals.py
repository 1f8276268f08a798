"""A map of non-overlapping address ranges with O(log n) lookup of any address inside one.

Both the allocation registry and the pinned-host-memory map are such maps: allocations never
overlap, and a pinned range nested in another is a second user of the outer range, not an entry.

A dict keyed by base address is the source of truth, so the common operations (insert, remove,
look up a base address) are O(1).  The sorted index that interior-address lookups and overlap
queries need is brought up to date lazily, when such a query comes: alloc/free pairs that never
ask about interior addresses never pay for it, and a base inserted and removed between two such
queries never touches it at all.  Each base still enters and leaves the index at most once, so
the amortised cost is that of an eager sorted map.

Not synchronised: callers hold their own lock around compound operations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from sortedcontainers import SortedList

V = TypeVar("V")


class IntervalMap(Generic[V]):
    __slots__ = ("_entries", "_index", "_to_add", "_to_remove")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, V]] = {}
        self._index: SortedList = SortedList()
        self._to_add: set[int] = set()  # in _entries, not yet in _index
        self._to_remove: set[int] = set()  # in _index, no longer in _entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[tuple[int, int, V]]:
        for base in sorted(self._entries):
            end, value = self._entries[base]
            yield base, end, value

    def _sync(self) -> None:
        if self._to_remove:
            for base in self._to_remove:
                self._index.remove(base)
            self._to_remove.clear()
        if self._to_add:
            self._index.update(self._to_add)
            self._to_add.clear()

    def get(self, base: int) -> tuple[int, V] | None:
        """``(end, value)`` of the entry starting exactly at ``base``."""
        return self._entries.get(base)

    def find(self, addr: int) -> tuple[int, int, V] | None:
        """The entry ``[base, end)`` containing ``addr``, or ``None``."""
        hit = self._entries.get(addr)
        if hit is not None:  # the common case: a base address
            return addr, hit[0], hit[1]
        if self._to_add or self._to_remove:
            self._sync()
        i = self._index.bisect_right(addr) - 1
        if i < 0:
            return None
        base = self._index[i]
        end, value = self._entries[base]
        return (base, end, value) if addr < end else None

    def overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        """Entries that intersect ``[base, end)``."""
        if self._to_add or self._to_remove:
            self._sync()
        found = []
        index = self._index
        i = max(index.bisect_right(base) - 1, 0)
        while i < len(index):
            b = index[i]
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
        if base in self._to_remove:
            self._to_remove.discard(base)  # still in the index: nothing to do
        else:
            self._to_add.add(base)

    def remove(self, base: int) -> V:
        end, value = self._entries.pop(base)
        if base in self._to_add:
            self._to_add.discard(base)  # never reached the index
        else:
            self._to_remove.add(base)
        return value

    def clear(self) -> None:
        self._entries.clear()
        self._index.clear()
        self._to_add.clear()
        self._to_remove.clear()
