"""A thread-safe map of non-overlapping address ranges with O(log n) lookup of any address inside one.

The allocation registry and the pinned-host-memory maps are such maps: allocations never overlap,
and a pinned range nested in another is a second user of the outer range, not an entry.

A dict keyed by base address is the source of truth, so the common operations (insert, remove,
look up a base address) are O(1).  The sorted index of bases that interior-address lookups and
overlap queries need (:class:`~pyoffload.addresses.sorted_index.SortedIndex`: addresses in blocks, so
that a search does not chase a pointer per comparison) is brought up to date lazily, when such a
query comes: alloc/free pairs that never ask about interior addresses never pay for it, and a base
inserted and removed between two such queries never touches it at all.  Each base still enters
and leaves the index at most once, so the amortised cost is that of an eager sorted map.

Thread safety: every field is guarded by the map's one lock (``lock``), held by every mutation,
every re-synchronisation of the index and every query but one: a lookup of a base address is a
single read of the entries dict (a dict read is atomic, in every build), so the common
``free(ptr)`` and ``mem_info(ptr)`` of a base pointer take no lock.  Callers that must update the
map together with their own state (the allocation registry's per-backend counts) hold ``lock``
and use the ``*_locked`` methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .sorted_index import LOAD, SortedIndex
from ..locks import AllocatorLock, allocator_lock

ADDRESS_SPACE = 1 << 64

__all__ = ["LOAD", "RangeMap"]


class RangeMap:
    """``[base, end) -> value`` for non-overlapping ranges (compiled, an extension type: see
    intervals.pxd; values are any objects)."""

    __slots__ = ("_entries", "_index", "_to_add", "_to_remove", "_busy", "lock")

    def __init__(self) -> None:
        self.lock: AllocatorLock = allocator_lock()  # guards the map (a plain field: read on every alloc and free)
        # -- guarded by lock (single reads of _entries excepted, see the module) ---------------
        self._entries: dict[int, tuple[int, Any]] = {}
        self._index = SortedIndex()  # the bases, sorted (blocks of at most 2 * LOAD)
        self._to_add: set[int] = set()  # in _entries, not yet in the index
        self._to_remove: set[int] = set()  # in the index, no longer in _entries
        # True while an update runs: found True by the next one, the update was stopped half-way
        # (an exception, a KeyboardInterrupt, between two statements) and the index is rebuilt
        # from _entries, the source of truth.
        self._busy = False

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def items(self) -> list[tuple[int, int, Any]]:
        """A snapshot of every entry, by base address."""
        with self.lock:
            entries = list(self._entries.items())
        return [(base, end, value) for base, (end, value) in sorted(entries, key=lambda e: e[0])]

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        return iter(self.items())

    # -- the index --------------------------------------------------------------------------

    def _begin(self) -> None:
        """Start an update (lock held), first repairing what a stopped one left."""
        if self._busy:
            index = SortedIndex()
            index.update((), sorted(self._entries))
            self._index, self._to_add, self._to_remove = index, set(), set()
        self._busy = True

    def _sync(self) -> None:
        """Bring the index up to date (lock held)."""
        self._begin()
        self._index.update(self._to_remove, sorted(self._to_add))
        self._to_remove.clear()
        self._to_add.clear()
        self._busy = False

    def _floor(self, x: int) -> int | None:
        """The largest indexed base <= ``x`` (lock held, index synced)."""
        return self._index.floor(x)

    # -- queries ----------------------------------------------------------------------------

    def get(self, base: int) -> tuple[int, Any] | None:
        """``(end, value)`` of the entry starting exactly at ``base``."""
        return self._entries.get(base)

    def find(self, addr: int) -> tuple[int, int, Any] | None:
        """The entry ``(base, end, value)`` containing ``addr``, or ``None``."""
        hit = self._entries.get(addr)
        if hit is not None:  # the common case: a base address (one atomic dict read)
            return addr, hit[0], hit[1]
        with self.lock:
            if self._to_add or self._to_remove or self._busy:
                self._sync()
            base = self._index.floor(addr)
            hit = None if base is None else self._entries.get(base)
        if hit is None:
            return None
        return (base, hit[0], hit[1]) if addr < hit[0] else None  # type: ignore[return-value]

    def overlapping(self, base: int, end: int) -> list[tuple[int, int, Any]]:
        """Entries that intersect ``[base, end)``, by base address."""
        with self.lock:
            return self._overlapping(base, end)

    def _overlapping(self, base: int, end: int) -> list[tuple[int, int, Any]]:
        if self._to_add or self._to_remove or self._busy:
            self._sync()
        start = self._index.floor(base)
        found: list[tuple[int, int, Any]] = []
        for b in self._index.between(base if start is None else start, end):
            e, value = self._entries[b]
            if e > base:
                found.append((b, e, value))
        return found

    # -- updates ----------------------------------------------------------------------------

    def insert(self, base: int, end: int, value: Any, check: bool = True) -> list[tuple[int, int, Any]]:
        """Add ``[base, end)`` unless it overlaps an entry; return the overlapping entries (empty
        when inserted).  ``check=False`` skips the overlap search (only a base clash is checked):
        for callers that know their ranges cannot overlap.  ``base`` is an address: ``0 <= base <
        2**64`` (``ValueError`` otherwise)."""
        with self.lock:
            return self.insert_locked(base, end, value, check)

    def insert_locked(self, base: int, end: int, value: Any, check: bool = True) -> list[tuple[int, int, Any]]:
        """:meth:`insert`, with ``lock`` held by the caller."""
        if not 0 <= base < ADDRESS_SPACE:
            raise ValueError(f"base address {base:#x} is outside the 64-bit address space")
        clash = self._entries.get(base)
        if clash is not None:
            return [(base, clash[0], clash[1])]
        if check:
            over = self._overlapping(base, end)
            if over:
                return over
        self._begin()
        self._entries[base] = (end, value)
        if base in self._to_remove:
            self._to_remove.discard(base)  # still in the index: nothing to do
        else:
            self._to_add.add(base)
        self._busy = False
        return []

    def remove(self, base: int) -> Any:
        """Remove the entry at ``base`` and return its value; ``KeyError`` if there is none."""
        with self.lock:
            return self.remove_locked(base)

    def remove_locked(self, base: int) -> Any:
        """:meth:`remove`, with ``lock`` held by the caller."""
        end, value = self._entries[base]
        self._begin()
        if base in self._to_add:
            self._to_add.discard(base)  # never reached the index
        else:
            self._to_remove.add(base)
        del self._entries[base]
        self._busy = False
        return value

    def clear(self) -> None:
        with self.lock:
            self._busy = True
            self._entries.clear()
            self._index.clear()
            self._to_add.clear()
            self._to_remove.clear()
            self._busy = False

    def reset_lock(self) -> None:
        """A fresh lock, for a child process after ``fork`` (the parent's may be held)."""
        self.lock = allocator_lock()
