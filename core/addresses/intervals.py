"""A thread-safe map of non-overlapping address ranges with O(log n) lookup of any address inside one.

The allocation registry and the pinned-host-memory maps are such maps: allocations never overlap,
and a pinned range nested in another is a second user of the outer range, not an entry.

A dict keyed by base address is the source of truth, so the common operations (insert, remove,
look up a base address) are O(1).  The sorted index of bases that interior-address lookups and
overlap queries need (:class:`pyoffload._index.SortedIndex`: plain 64-bit integers in blocks, so
that a search does not chase a pointer per comparison) is brought up to date lazily, when such a
query comes: alloc/free pairs that never ask about interior addresses never pay for it, and a base
inserted and removed between two such queries never touches it at all.  Each base still enters
and leaves the index at most once, so the amortised cost is that of an eager sorted map.

Thread safety: every mutation, and every re-synchronisation of the index, holds the map's lock.
A lookup of a base address is a single dict read; a lookup of an interior address while nothing
is pending is one call of the index (atomic under the GIL) and a dict read, and takes the lock
only when it has to re-synchronise or its answer could be stale.  So a lookup of a live range
always resolves, whatever other threads insert and remove meanwhile.  ``find`` is the registry's
hot path (``mem_info`` of an interior pointer, a launch argument), counted in frames.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from .._fastpath import Lock
from .._index import LOAD, SortedIndex

V = TypeVar("V")

ADDRESS_SPACE = 1 << 64

__all__ = ["LOAD", "RangeMap"]


class RangeMap(Generic[V]):
    """``[base, end) -> value`` for non-overlapping ranges."""

    __slots__ = ("_entries", "_index", "_to_add", "_to_remove", "_lock")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, V]] = {}
        self._index = SortedIndex()  # the bases, sorted (blocks of at most 2 * LOAD)
        self._to_add: set[int] = set()  # in _entries, not yet in the index
        self._to_remove: set[int] = set()  # in the index, no longer in _entries
        self._lock = Lock()  # as threading.Lock; the C fast path can see that it is held

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

    def _sync(self) -> None:
        """Bring the index up to date (lock held)."""
        self._index.update(self._to_remove, sorted(self._to_add))
        self._to_remove.clear()
        self._to_add.clear()

    def _floor(self, x: int) -> int | None:
        """The largest indexed base <= ``x`` (lock held, index synced)."""
        return self._index.floor(x)

    # -- queries ----------------------------------------------------------------------------

    def get(self, base: int) -> tuple[int, V] | None:
        """``(end, value)`` of the entry starting exactly at ``base``."""
        return self._entries.get(base)

    def find(self, addr: int) -> tuple[int, int, V] | None:
        """The entry ``(base, end, value)`` containing ``addr``, or ``None``."""
        entries = self._entries
        hit = entries.get(addr)
        if hit is not None:  # the common case: a base address
            return addr, hit[0], hit[1]
        if not self._to_add and not self._to_remove:  # nothing pending: no lock needed ...
            base = self._index.floor(addr)
            if base is None:
                if not self._to_add:  # ... unless a base arrived meanwhile
                    return None
            else:
                hit = entries.get(base)
                if hit is not None and not self._to_add:
                    return (base, hit[0], hit[1]) if addr < hit[0] else None
        with self._lock:
            if self._to_add or self._to_remove:
                self._sync()
            base = self._index.floor(addr)
            if base is None:
                return None
            end, value = entries[base]
        return (base, end, value) if addr < end else None

    def overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        """Entries that intersect ``[base, end)``, by base address."""
        with self._lock:
            return self._overlapping(base, end)

    def _overlapping(self, base: int, end: int) -> list[tuple[int, int, V]]:
        if self._to_add or self._to_remove:
            self._sync()
        start = self._index.floor(base)
        found: list[tuple[int, int, V]] = []
        for b in self._index.between(base if start is None else start, end):
            e, value = self._entries[b]
            if e > base:
                found.append((b, e, value))
        return found

    # -- updates ----------------------------------------------------------------------------

    def insert(self, base: int, end: int, value: V, check: bool = True) -> list[tuple[int, int, V]]:
        """Add ``[base, end)`` unless it overlaps an entry; return the overlapping entries (empty
        when inserted).  ``check=False`` skips the overlap search (only a base clash is checked):
        for callers that know their ranges cannot overlap.  ``base`` is an address: ``0 <= base <
        2**64`` (``ValueError`` otherwise)."""
        if not 0 <= base < ADDRESS_SPACE:
            raise ValueError(f"base address {base:#x} is outside the 64-bit address space")
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
            self._index.clear()
            self._to_add.clear()
            self._to_remove.clear()

    def reset_lock(self) -> None:
        """A fresh lock, for a child process after ``fork`` (the parent's may be held)."""
        self._lock = Lock()

    def parts(self) -> tuple[dict[int, tuple[int, Any]], set[int], set[int], Lock]:
        """The entries dict, the pending additions and removals, and the lock: what the C fast
        path of allocation and free updates (under the rules of :meth:`insert` and
        :meth:`remove`, and only while the lock is free).  The objects stay the same for the
        map's life; the lock is replaced only by :meth:`reset_lock`, in a forked child."""
        return self._entries, self._to_add, self._to_remove, self._lock
