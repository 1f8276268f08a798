"""A thread-safe map of non-overlapping address ranges with O(log n) lookup of any address inside one.

The allocation registry and the pinned-host-memory maps are such maps: allocations never overlap,
and a pinned range nested in another is a second user of the outer range, not an entry.

A dict keyed by base address is the source of truth, so the common operations (insert, remove,
look up a base address) are O(1).  The sorted index that interior-address lookups and overlap
queries need is brought up to date lazily, when such a query comes: alloc/free pairs that never
ask about interior addresses never pay for it, and a base inserted and removed between two such
queries never touches it at all.  Each base still enters and leaves the index at most once, so
the amortised cost is that of an eager sorted map.

Thread safety: every mutation, and every lookup that needs the index, holds the map's lock; a
lookup of a base address is a single dict read.  So a lookup of a live range always resolves,
whatever other threads insert and remove meanwhile.  ``find`` inlines the index search: it is the
registry's hot path (``mem_info`` of an interior pointer, a launch argument), counted in frames.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")

LOAD = 512  # sub-list length (the layout of sortedcontainers' SortedList)


class RangeMap(Generic[V]):
    """``[base, end) -> value`` for non-overlapping ranges."""

    __slots__ = ("_entries", "_lists", "_maxes", "_to_add", "_to_remove", "_lock")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, V]] = {}
        # The sorted index of bases: sub-lists of at most 2 * LOAD items and each one's maximum,
        # so that finding the largest base <= x is two C bisections.
        self._lists: list[list[int]] = []
        self._maxes: list[int] = []
        self._to_add: set[int] = set()  # in _entries, not yet in the index
        self._to_remove: set[int] = set()  # in the index, no longer in _entries
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def items(self) -> list[tuple[int, int, V]]:
        """A snapshot of every entry, by base address."""
        with self._lock:
            entries = list(self._entries.items())
        return [(base, end, value) for base, (end, value) in sorted(entries, key=lambda e: e[0])]

    def __iter__(self) -> Iterator[tuple[int, int, V]]:
        return iter(self.items())

    # -- the index --------------------------------------------------------------------------

    def _index_add(self, x: int) -> None:
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
        if len(sub) > 2 * LOAD:
            half = sub[LOAD:]
            del sub[LOAD:]
            maxes[pos] = sub[-1]
            lists.insert(pos + 1, half)
            maxes.insert(pos + 1, half[-1])

    def _index_remove(self, x: int) -> None:
        lists, maxes = self._lists, self._maxes
        pos = bisect_left(maxes, x)
        sub = lists[pos]
        del sub[bisect_left(sub, x)]
        if sub:
            maxes[pos] = sub[-1]
        else:
            del lists[pos]
            del maxes[pos]

    def _sync(self) -> None:
        """Bring the index up to date (lock held)."""
        if self._to_remove:
            for base in self._to_remove:
                self._index_remove(base)
            self._to_remove.clear()
        if self._to_add:
            for base in sorted(self._to_add):
                self._index_add(base)
            self._to_add.clear()

    def _floor(self, x: int) -> int | None:
        """The largest indexed base <= ``x`` (lock held, index synced)."""
        maxes = self._maxes
        pos = bisect_left(maxes, x)
        if pos == len(maxes):
            return maxes[-1] if maxes else None
        sub = self._lists[pos]
        j = bisect_right(sub, x) - 1
        if j >= 0:
            return sub[j]
        return maxes[pos - 1] if pos else None

    # -- queries ----------------------------------------------------------------------------

    def get(self, base: int) -> tuple[int, V] | None:
        """``(end, value)`` of the entry starting exactly at ``base``."""
        return self._entries.get(base)

    def find(self, addr: int) -> tuple[int, int, V] | None:
        """The entry ``(base, end, value)`` containing ``addr``, or ``None``."""
        hit = self._entries.get(addr)
        if hit is not None:  # the common case: a base address
            return addr, hit[0], hit[1]
        with self._lock:
            if self._to_add or self._to_remove:
                self._sync()
            maxes = self._maxes
            if not maxes:
                return None
            pos = bisect_left(maxes, addr)
            if pos == len(maxes):
                base = maxes[-1]
            else:
                sub = self._lists[pos]
                j = bisect_right(sub, addr) - 1
                if j >= 0:
                    base = sub[j]
                elif pos:
                    base = maxes[pos - 1]
                else:
                    return None
            end, value = self._entries[base]
        return (base, end, value) if addr < end else None

    def overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        """Entries that intersect ``[base, end)``, by base address."""
        with self._lock:
            return self._overlapping(base, end)

    def _overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        if self._to_add or self._to_remove:
            self._sync()
        start = self._floor(base)
        found: list[tuple[int, int, V]] = []
        pos = bisect_left(self._maxes, start) if start is not None else 0
        for k in range(pos, len(self._lists)):
            sub = self._lists[k]
            j = bisect_left(sub, start) if start is not None and k == pos else 0
            for b in sub[j:]:
                if b >= end:
                    return found
                e, value = self._entries[b]
                if e > base:
                    found.append((b, e, value))
        return found

    # -- updates ----------------------------------------------------------------------------

    def insert(self, base: int, end: int, value: V, check: bool = True) -> list[tuple[int, int, V]]:
        """Add ``[base, end)`` unless it overlaps an entry; return the overlapping entries (empty
        when inserted).  ``check=False`` skips the overlap search (only a base clash is checked):
        for callers that know their ranges cannot overlap."""
        lock = self._lock
        lock.acquire()  # not `with`: a third cheaper on every alloc and free
        try:
            clash = self._entries.get(base)
            if clash is not None:
                return [(base, clash[0], clash[1])]
            if check:
                over = self._overlapping(base, end)
                if over:
                    return over
            self._entries[base] = (end, value)
            if base in self._to_remove:
                self._to_remove.discard(base)  # still in the index: nothing to do
            else:
                self._to_add.add(base)
            return []
        finally:
            lock.release()

    def remove(self, base: int) -> V:
        """Remove the entry at ``base`` and return its value; ``KeyError`` if there is none."""
        lock = self._lock
        lock.acquire()
        try:
            end, value = self._entries.pop(base)
            if base in self._to_add:
                self._to_add.discard(base)  # never reached the index
            else:
                self._to_remove.add(base)
            return value
        finally:
            lock.release()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._lists.clear()
            self._maxes.clear()
            self._to_add.clear()
            self._to_remove.clear()

    def reset_lock(self) -> None:
        """A fresh lock, for a child process after ``fork`` (the parent's may be held)."""
        self._lock = threading.Lock()
