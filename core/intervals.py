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

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class SortedIndex:
    """Sorted ints in a list of bounded sub-lists (the layout of sortedcontainers' SortedList):
    insert and remove move at most ``2 * LOAD`` items, and finding the largest item <= x is two C
    bisections, with no positional bookkeeping (which is what makes ``SortedList[i]`` slow)."""

    LOAD = 512
    __slots__ = ("_lists", "_maxes")

    def __init__(self) -> None:
        self._lists: list[list[int]] = []
        self._maxes: list[int] = []

    def __len__(self) -> int:
        return sum(len(sub) for sub in self._lists)

    def add(self, x: int) -> None:
        lists, maxes = self._lists, self._maxes
        if not maxes:
            lists.append([x])
            maxes.append(x)
            return
        pos = bisect_left(maxes, x)
        if pos == len(maxes):
            pos -= 1
            sub = lists[pos]
            sub.append(x)
            maxes[pos] = x
        else:
            sub = lists[pos]
            insort(sub, x)
        if len(sub) > 2 * self.LOAD:
            half = sub[self.LOAD:]
            del sub[self.LOAD:]
            maxes[pos] = sub[-1]
            lists.insert(pos + 1, half)
            maxes.insert(pos + 1, half[-1])

    def remove(self, x: int) -> None:
        lists, maxes = self._lists, self._maxes
        pos = bisect_left(maxes, x)
        sub = lists[pos]
        del sub[bisect_left(sub, x)]
        if sub:
            maxes[pos] = sub[-1]
        else:
            del lists[pos]
            del maxes[pos]

    def floor(self, x: int) -> int | None:
        """The largest item <= ``x``, or ``None``."""
        maxes = self._maxes
        pos = bisect_left(maxes, x)
        if pos == len(maxes):
            return maxes[-1] if maxes else None
        sub = self._lists[pos]
        j = bisect_right(sub, x) - 1
        if j >= 0:
            return sub[j]
        return maxes[pos - 1] if pos else None

    def iter_from(self, x: int) -> Iterator[int]:
        """Items >= the floor of ``x`` (or from the first item), in order."""
        maxes = self._maxes
        start = self.floor(x)
        pos = bisect_left(maxes, start) if start is not None else 0
        for k in range(pos, len(self._lists)):
            sub = self._lists[k]
            j = bisect_left(sub, start) if start is not None and k == pos else 0
            yield from sub[j:]

    def clear(self) -> None:
        self._lists.clear()
        self._maxes.clear()


class IntervalMap(Generic[V]):
    __slots__ = ("_entries", "_index", "_to_add", "_to_remove")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, V]] = {}
        self._index = SortedIndex()
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
            for base in sorted(self._to_add):
                self._index.add(base)
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
        base = self._index.floor(addr)
        if base is None:
            return None
        end, value = self._entries[base]
        return (base, end, value) if addr < end else None

    def overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        """Entries that intersect ``[base, end)``."""
        if self._to_add or self._to_remove:
            self._sync()
        found = []
        for b in self._index.iter_from(base):
            if b >= end:
                break
            e, value = self._entries[b]
            if e > base:
                found.append((b, e, value))
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
