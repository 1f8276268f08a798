"""Unit tests of the address bookkeeping: ``RangeMap`` (the allocation registry's index) and the
pinned-host-memory map with ``lock``/``unlock``/``find_pinned``/``is_pinned`` on the host device.

``RangeMap`` is tested directly, with its documented index layout (sorted blocks of at most
``2 * LOAD`` bases, each with its maximum, read back from ``SortedIndex.blocks``/``maxes``)
checked after every batch of updates, so that a lookup that happens to land on the right answer
through a broken index still fails.  The pinning tests go through the public API; wrapper plugins
make the host backend hand out device addresses unlike the host ones, report memory as pinned by
the vendor, and count the unlock calls.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, InvalidArgumentError, OffloadError, runtime
from pyoffload.addresses.intervals import LOAD, RangeMap
from pyoffload.addresses.pinned import PinnedMap, PinnedRange
from pyoffload.backend import hookimpl
from pyoffload.pinning import device_pointer, find_pinned

TOP = 2**64


# -- RangeMap --------------------------------------------------------------------------------


def check_index(m: RangeMap[Any]) -> None:
    """The index, once synced, holds exactly the live bases in the documented layout."""
    m.find(-1)  # an address below every base: forces the lazy index up to date
    assert not m._to_add and not m._to_remove
    for sub, top in zip(m._index.blocks(), m._index.maxes(), strict=True):
        assert sub, "an empty sub-list was left in the index"
        assert len(sub) <= 2 * LOAD, f"a sub-list of {len(sub)} bases was not split"
        assert sub == sorted(sub) and top == sub[-1]
    flat = [b for sub in m._index.blocks() for b in sub]
    assert flat == sorted(m._entries)
    assert m._index.maxes() == sorted(m._index.maxes())


def brute_find(ranges: dict[int, int], addr: int) -> int | None:
    hits = [b for b, e in ranges.items() if b <= addr < e]
    return hits[0] if hits else None


def brute_overlapping(ranges: dict[int, int], base: int, end: int) -> list[int]:
    return sorted(b for b, e in ranges.items() if b < end and base < e)


def test_empty_map():
    m: RangeMap[str] = RangeMap()
    assert len(m) == 0 and not m
    assert m.find(0) is None and m.find(123) is None
    assert m.get(0) is None
    assert m.overlapping(0, TOP) == []
    assert m.items() == [] and list(m) == []
    with pytest.raises(KeyError):
        m.remove(0)


def test_one_range_boundaries():
    m: RangeMap[str] = RangeMap()
    assert m.insert(100, 150, "a") == []
    assert len(m) == 1 and m
    assert m.get(100) == (150, "a") and m.get(101) is None
    assert m.find(100) == (100, 150, "a")
    assert m.find(149) == (100, 150, "a")
    assert m.find(150) is None, "one past the end is outside the range"
    assert m.find(99) is None
    assert m.find(0) is None
    assert m.find(10**6) is None
    # overlap queries are half-open on both sides
    assert m.overlapping(150, 200) == []
    assert m.overlapping(50, 100) == []
    assert m.overlapping(149, 150) == [(100, 150, "a")]
    assert m.overlapping(99, 101) == [(100, 150, "a")]
    assert m.overlapping(0, TOP) == [(100, 150, "a")]
    assert m.overlapping(120, 130) == [(100, 150, "a")]
    # a zero-length query at a point inside a range reports that range, so an empty entry can
    # never be inserted inside another one (``find`` would then stop at it); at the base or one
    # past the end it touches nothing
    assert m.overlapping(120, 120) == [(100, 150, "a")]
    assert m.insert(120, 120, "empty") == [(100, 150, "a")]
    assert m.overlapping(100, 100) == []
    assert m.overlapping(150, 150) == []
    assert m.overlapping(99, 99) == []
    assert m.items() == [(100, 150, "a")] and list(m) == [(100, 150, "a")]


def test_insert_refuses_overlaps_and_base_clashes():
    m: RangeMap[str] = RangeMap()
    m.insert(100, 200, "a")
    m.insert(300, 400, "b")
    assert m.insert(100, 101, "x") == [(100, 200, "a")], "same base"
    assert m.insert(150, 160, "x") == [(100, 200, "a")], "inside"
    assert m.insert(50, 101, "x") == [(100, 200, "a")], "over the start"
    assert m.insert(199, 250, "x") == [(100, 200, "a")], "over the end"
    assert m.insert(150, 350, "x") == [(100, 200, "a"), (300, 400, "b")], "across two"
    assert m.insert(0, TOP, "x") == [(100, 200, "a"), (300, 400, "b")], "around everything"
    assert len(m) == 2 and m.get(150) is None and m.get(50) is None
    # touching ranges do not overlap
    assert m.insert(200, 300, "c") == []
    assert m.insert(0, 100, "d") == []
    assert m.insert(400, 401, "e") == []
    assert [b for b, _, _ in m.items()] == [0, 100, 200, 300, 400]
    assert m.find(299) == (200, 300, "c") and m.find(300) == (300, 400, "b")
    check_index(m)


def test_insert_without_check_only_refuses_a_base_clash():
    m: RangeMap[str] = RangeMap()
    m.insert(100, 200, "a")
    assert m.insert(100, 150, "x", check=False) == [(100, 200, "a")]
    assert m.get(100) == (200, "a")
    # the caller vouches that this cannot overlap; the map takes its word
    assert m.insert(150, 160, "b", check=False) == []
    assert m.get(150) == (160, "b")
    # listed by base, even where the ends are in another order
    assert m.items() == [(100, 200, "a"), (150, 160, "b")]


def test_floor_is_the_largest_base_at_or_below():
    # ``_floor`` expects the lock held and the index synced: check_index syncs it, and a single
    # thread needs no lock
    m: RangeMap[int] = RangeMap()
    assert m._floor(5) is None, "an empty index"
    n = 4 * LOAD
    for i in range(n):
        m.insert(i * 10, i * 10 + 5, i)
    check_index(m)
    assert [len(sub) for sub in m._index.blocks()] == [LOAD, LOAD, 2 * LOAD]
    assert m._floor(-1) is None
    for x in [
        0,
        1,
        9,
        10,
        11,
        (LOAD - 1) * 10,
        (LOAD - 1) * 10 + 7,
        LOAD * 10 - 1,
        LOAD * 10,
        LOAD * 10 + 3,
        2 * LOAD * 10 - 1,
        2 * LOAD * 10,
        (n - 1) * 10,
        (n - 1) * 10 + 9,
        TOP,
    ]:
        assert m._floor(x) == min(x // 10, n - 1) * 10, x
    for sub in m._index.blocks():  # around the first and the last base of each sub-list
        for b in (sub[0], sub[-1]):
            assert m._floor(b) == b and m._floor(b + 1) == b
            assert m._floor(b - 1) == (b - 10 if b else None)


def test_queries_look_only_near_the_address():
    """``find`` and ``overlapping`` read the entries they report (and the one below), not the map."""

    class CountingDict(dict):
        reads = 0

        def __getitem__(self, key: int) -> Any:
            CountingDict.reads += 1
            return super().__getitem__(key)

        def get(self, key: int, default: Any = None) -> Any:
            CountingDict.reads += 1
            return super().get(key, default)

    m: RangeMap[int] = RangeMap()
    n = 3 * LOAD
    for i in range(n):
        m.insert(i * 10, i * 10 + 5, i)
    check_index(m)
    try:
        m._entries = CountingDict(m._entries)
    except TypeError:  # compiled: the field holds exactly a dict (the *-pure rows count the reads)
        pytest.skip("RangeMap is compiled: its entries cannot be replaced by a counting dict")
    for base, end, hits in [
        (3, 4, 1),
        (7, 8, 0),
        (LOAD * 10 + 2, LOAD * 10 + 13, 2),
        (LOAD * 10 - 3, LOAD * 10 + 1, 1),
        (2 * LOAD * 10 + 6, 2 * LOAD * 10 + 9, 0),
        ((n - 1) * 10 + 1, TOP, 1),
        (-5, 1, 1),
    ]:
        CountingDict.reads = 0
        assert len(m.overlapping(base, end)) == hits, (base, end)
        assert CountingDict.reads <= hits + 1, f"{CountingDict.reads} entries read for [{base}, {end})"
    CountingDict.reads = 0
    assert m.find((n - 1) * 10 + 1) == ((n - 1) * 10, (n - 1) * 10 + 5, n - 1)
    assert m.find(LOAD * 10 + 7) is None
    assert CountingDict.reads == 4, "each interior lookup reads the address itself, then the entry below"


def test_finding_a_base_address_takes_no_lock():
    """The registry's hot path: a base address resolves even while another thread updates the map."""
    m: RangeMap[str] = RangeMap()
    m.insert(4096, 8192, "a")
    found: list[Any] = []
    with m.lock:  # as if another thread were inside an update
        t = threading.Thread(target=lambda: found.append(m.find(4096)), daemon=True)
        t.start()
        t.join(5)
        assert found == [(4096, 8192, "a")], "the lookup of a base address waited for the map's lock"
    t.join()


def test_overlap_check_against_the_range_just_below():
    """The new range starts inside the range below it, whatever sub-list that one is in."""
    m: RangeMap[int] = RangeMap()
    bases = [i * 100 for i in range(3 * LOAD)]
    for b in bases:
        assert m.insert(b, b + 50, b) == []
    check_index(m)
    assert len(m._index.blocks()) >= 2
    for k in range(1, len(m._index.blocks())):
        first = m._index.blocks()[k][0]
        below = m._index.blocks()[k - 1][-1]
        # inside the last range of the previous sub-list: must be refused
        assert m.insert(below + 10, below + 60, -1) == [(below, below + 50, below)]
        # inside the first range of this sub-list
        assert m.insert(first + 49, first + 70, -1) == [(first, first + 50, first)]
        # in the gap just before it: fine
        assert m.insert(first - 50, first, -2) == []
        assert m.remove(first - 50) == -2
    # below the first range and past the last one
    with pytest.raises(ValueError, match="outside the 64-bit address space"):
        m.insert(-10, 1, -1)
    assert m.overlapping(-10, 1) == [(0, 50, 0)], "a query may start below address 0"
    last = bases[-1]
    assert m.insert(last + 49, last + 1000, -1) == [(last, last + 50, last)]
    assert m.insert(last + 50, last + 1000, 7) == []
    check_index(m)


def test_index_splits_above_2_load_ranges():
    m: RangeMap[int] = RangeMap()
    for i in range(2 * LOAD):
        m.insert(i * 10, i * 10 + 5, i)
    check_index(m)
    assert [len(s) for s in m._index.blocks()] == [2 * LOAD], "split before the sub-list was full"
    m.insert(2 * LOAD * 10, 2 * LOAD * 10 + 5, 2 * LOAD)
    check_index(m)
    assert [len(s) for s in m._index.blocks()] == [LOAD, LOAD + 1]
    assert m._index.maxes() == [(LOAD - 1) * 10, 2 * LOAD * 10]
    # interior lookups on both sides of the split and right at it
    for i in (0, 1, LOAD - 2, LOAD - 1, LOAD, LOAD + 1, 2 * LOAD - 1, 2 * LOAD):
        assert m.find(i * 10 + 3) == (i * 10, i * 10 + 5, i)
        assert m.find(i * 10 + 5) is None
        assert m.find(i * 10 - 1) is None
    assert m.overlapping((LOAD - 1) * 10 + 4, LOAD * 10 + 1) == [
        ((LOAD - 1) * 10, (LOAD - 1) * 10 + 5, LOAD - 1),
        (LOAD * 10, LOAD * 10 + 5, LOAD),
    ]


def test_index_split_of_a_middle_sub_list():
    """Descending and interleaved inserts split sub-lists that are not the last one."""
    m: RangeMap[int] = RangeMap()
    n = 5 * LOAD + 7
    for i in reversed(range(0, 2 * n, 2)):  # even bases, highest first
        m.insert(i * 8, i * 8 + 4, i)
        if i % 401 == 0:
            check_index(m)
    for i in range(1, 2 * n, 2):  # odd bases fill the gaps: each sub-list grows in the middle
        m.insert(i * 8, i * 8 + 4, i)
    check_index(m)
    assert len(m) == 2 * n and len(m._index.blocks()) > 4
    for i in range(0, 2 * n, 37):
        assert m.find(i * 8 + 2) == (i * 8, i * 8 + 4, i)
        assert m.find(i * 8 + 4) is None
    for sub in m._index.blocks():  # the first base of every sub-list, where a one-off search goes astray
        b = sub[0]
        assert m.find(b + 1) == (b, b + 4, b // 8)
        assert m.find(b - 1) is None
        if b:
            assert m.overlapping(b - 5, b + 1) == [(b - 8, b - 4, b // 8 - 1), (b, b + 4, b // 8)]


def test_resync_after_batches_of_removals():
    m: RangeMap[int] = RangeMap()
    ref: dict[int, int] = {}
    n = 4 * LOAD + 3
    for i in range(n):
        m.insert(i * 16, i * 16 + 8, i)
        ref[i * 16] = i * 16 + 8
    check_index(m)
    # remove whole sub-lists and parts of others between two syncs
    doomed = [b for b in ref if (b // 16) % 3 != 1 or LOAD <= b // 16 < 2 * LOAD + 5]
    for b in doomed:
        assert m.remove(b) == b // 16
        del ref[b]
    assert len(m) == len(ref)
    # a removed base gives nothing even before the index catches up
    assert m.get(doomed[0]) is None
    for q in range(0, n * 16 + 32, 5):
        found = m.find(q)
        assert (found[0] if found else None) == brute_find(ref, q), q
    check_index(m)
    assert all(m._index.blocks())
    for q in range(0, n * 16, 97):
        got = [b for b, _, _ in m.overlapping(q, q + 300)]
        assert got == brute_overlapping(ref, q, q + 300)
    # and empty the map completely, then reuse it
    for b in list(ref):
        m.remove(b)
    check_index(m)
    assert m._index.blocks() == [] and m._index.maxes() == [] and m.find(16 + 1) is None
    assert m.insert(5, 6, 1) == [] and m.find(5) == (5, 6, 1)
    check_index(m)


def test_removed_and_reinserted_before_a_sync():
    m: RangeMap[str] = RangeMap()
    m.insert(10, 20, "a")
    m.insert(30, 40, "b")
    check_index(m)
    assert m.remove(10) == "a"
    # back with another size before any query synced the index
    assert m.insert(10, 25, "c") == []
    assert m.find(24) == (10, 25, "c") and m.find(25) is None
    check_index(m)
    assert m._index.blocks() == [[10, 30]]
    # inserted and removed again between two queries: never reaches the index
    m.insert(50, 60, "d")
    assert m.remove(50) == "d"
    assert not m._to_add
    assert m.find(55) is None
    check_index(m)
    assert m._index.blocks() == [[10, 30]]
    # removed twice: the second is a KeyError and changes nothing
    m.remove(30)
    with pytest.raises(KeyError):
        m.remove(30)
    assert m.find(35) is None and len(m) == 1
    check_index(m)


def test_overlapping_lists_every_range_it_crosses_in_order():
    m: RangeMap[int] = RangeMap()
    ref: dict[int, int] = {}
    for i in range(3 * LOAD):
        b = i * 10
        m.insert(b, b + (3 if i % 2 else 9), i)
        ref[b] = b + (3 if i % 2 else 9)
    for base, end in [
        (0, 1),
        (5, 6),
        (4, 13),
        (8, 10),
        (9, 10),
        (9, 20),
        (LOAD * 10 - 2, LOAD * 10 + 1),
        (0, 3 * LOAD * 10),
        (1000, 1000),
        (3 * LOAD * 10 - 1, TOP),
        (-5, 0),
        (-5, 1),
    ]:
        got = m.overlapping(base, end)
        assert [b for b, _, _ in got] == brute_overlapping(ref, base, end), (base, end)
        assert all(e == ref[b] and v == b // 10 for b, e, v in got)


def test_huge_addresses_near_2_64():
    m: RangeMap[str] = RangeMap()
    assert m.insert(TOP - 4096, TOP, "top") == []
    assert m.insert(TOP - 8192, TOP - 4096, "below") == []
    assert m.insert(0, 4096, "zero") == []
    assert m.find(TOP - 1) == (TOP - 4096, TOP, "top")
    assert m.find(TOP - 4097) == (TOP - 8192, TOP - 4096, "below")
    assert m.find(TOP) is None
    assert m.find(TOP - 8193) is None
    assert m.find(4095) == (0, 4096, "zero") and m.find(4096) is None
    assert m.insert(TOP - 1, TOP + 10, "x") == [(TOP - 4096, TOP, "top")]
    with pytest.raises(ValueError, match="outside the 64-bit address space"):
        m.insert(TOP, TOP + 10, "after")
    with pytest.raises(ValueError, match="outside the 64-bit address space"):
        m.insert(-1, 10, "before")
    assert len(m) == 3, "a refused base leaves nothing behind"
    assert m.overlapping(TOP - 1, TOP) == [(TOP - 4096, TOP, "top")]
    assert m.overlapping(TOP - 1, TOP + 100) == [(TOP - 4096, TOP, "top")]
    assert [v for _, _, v in m.overlapping(4000, TOP - 4100)] == ["zero", "below"]


def test_items_are_sorted_and_a_snapshot():
    m: RangeMap[int] = RangeMap()
    for b in (500, 20, 7000, 300):
        m.insert(b, b + 1, b)
    snap = m.items()
    assert snap == [(20, 21, 20), (300, 301, 300), (500, 501, 500), (7000, 7001, 7000)]
    m.remove(300)
    assert len(snap) == 4 and [b for b, _, _ in m] == [20, 500, 7000]


def test_clear_and_reset_lock():
    m: RangeMap[int] = RangeMap()
    for i in range(2 * LOAD + 1):
        m.insert(i * 2, i * 2 + 1, i)
    m.find(1)
    m.remove(0)
    m.insert(1 << 40, (1 << 40) + 1, -1)  # pending: not yet in the index
    lock = m.lock
    m.clear()
    assert len(m) == 0 and not m and m.find(2) is None and m.find(1 << 40) is None
    assert m._index.blocks() == [] and m._index.maxes() == [] and not m._to_add and not m._to_remove
    lock.acquire()  # a lock left held (as after fork) must not block the map once replaced
    try:
        m.reset_lock()
        assert m.lock is not lock
        assert m.insert(4, 8, 1) == [] and m.find(5) == (4, 8, 1)
    finally:
        lock.release()


# -- PinnedMap -------------------------------------------------------------------------------


def test_pinned_map_is_indexed_by_host_and_device_address():
    pins = PinnedMap()
    assert len(pins) == 0 and not pins
    a = PinnedRange(0x1000, 0x100, 0x9000, external=False)
    b = PinnedRange(0x2000, 0x10, 0x5000, external=True, writable=False)
    pins.insert(a)
    pins.insert(b)
    assert len(pins) == 2
    assert pins.by_host.find(0x10FF) == (0x1000, 0x1100, a)
    assert pins.by_dev.find(0x90FF) == (0x9000, 0x9100, a)
    assert pins.by_dev.find(0x500F) == (0x5000, 0x5010, b)
    assert pins.by_dev.find(0x2005) is None and pins.by_host.find(0x5005) is None
    assert pins.containing(0x1000, 0x100) is a
    assert pins.containing(0x10F0, 0x10) is a
    assert pins.containing(0x10F0, 0x11) is None, "one byte past the end"
    assert pins.containing(0x0FFF, 1) is None
    assert pins.entries() == [a, b]
    assert a.users == 0 and a.external is False and a.writable is True
    assert b.external is True and b.writable is False
    a.holds.append((0x1000, 0x100, None))
    assert a.users == 1
    assert repr(a) == "<PinnedRange 0x1000+256 locked users=1>"
    assert repr(b) == "<PinnedRange 0x2000+16 external users=0>"
    pins.remove(a)
    assert len(pins) == 1 and pins.by_dev.find(0x9000) is None and pins.by_host.find(0x1000) is None
    lock = pins.lock
    assert lock.acquire(timeout=5) and lock.acquire(timeout=5), "compound updates nest: a re-entrant lock"
    pins.reset_locks()  # as in a child after fork, with the old lock held
    assert pins.lock is not lock
    assert pins.lock.acquire(timeout=5) and pins.lock.acquire(timeout=5)
    pins.lock.release()
    pins.lock.release()
    lock.release()
    lock.release()
    assert pins.by_host.find(0x2000) == (0x2000, 0x2010, b) and pins.by_dev.find(0x5000) == (0x5000, 0x5010, b)


# -- lock / unlock / find_pinned / is_pinned on the host device ------------------------------


class _Hooks:
    """A wrapper plugin for the host backend: device addresses ``OFFSET`` above the host ones,
    optional vendor-pinned ranges, and a log of the lock/unlock calls."""

    OFFSET = 1 << 44

    def __init__(self) -> None:
        self.locks: list[tuple[int, int]] = []
        self.unlocks: list[int] = []
        self.queries: list[int] = []  # the addresses data_pinned_info_impl was asked about
        self.handles: set[Any] = set()  # the device handles the three hooks were given
        self.vendor: list[tuple[int, int, int]] = []  # (base, size, device base)

    def factory(self, backend: str) -> Any:
        hooks = self

        class Wrapper:
            @hookimpl(wrapper=True)
            def data_lock_impl(self, device: Any, ptr: int, size: int) -> Generator[None, Any, Any]:
                hooks.locks.append((ptr, size))
                hooks.handles.add(device)
                return (yield) + hooks.OFFSET

            @hookimpl(wrapper=True)
            def data_unlock_impl(self, device: Any, ptr: int) -> Generator[None, Any, Any]:
                hooks.unlocks.append(ptr)
                hooks.handles.add(device)
                return (yield)

            @hookimpl(wrapper=True)
            def data_pinned_info_impl(self, device: Any, ptr: int) -> Generator[None, Any, Any]:
                found = yield
                hooks.queries.append(ptr)
                hooks.handles.add(device)
                for base, size, dev in hooks.vendor:
                    if base <= ptr < base + size:
                        return base, size, dev
                return found

        return Wrapper()


@pytest.fixture
def hooks(host):
    h = _Hooks()
    factory = h.factory  # one bound method: the runtime names the registered wrapper by its id
    runtime.add_wrapper(factory)
    try:
        yield h
    finally:
        runtime.remove_wrapper(factory)
        # a failed test must not leave ranges behind for the next one to trip over
        for entry in host.pins.entries():
            host.pins.remove(entry)


def _no_pins(host: Any) -> None:
    assert len(host.pins) == 0 and len(host.pins.by_dev) == 0


def test_lock_and_unlock_one_range(host, hooks):
    buf = np.arange(256, dtype=np.uint8)
    addr = buf.ctypes.data
    assert not pyoffload.is_pinned(addr) and not pyoffload.is_pinned(buf)
    dev = host.lock(buf)
    assert dev == addr + hooks.OFFSET
    assert hooks.locks == [(addr, 256)]
    assert pyoffload.is_pinned(addr) and pyoffload.is_pinned(addr + 255) and pyoffload.is_pinned(buf)
    assert pyoffload.is_pinned(buf[100:]), "a buffer is looked up by its first byte"
    assert not pyoffload.is_pinned(addr + 256) and not pyoffload.is_pinned(addr - 1)
    rt = host.rt
    assert find_pinned(rt, addr + 10) == (addr + 10, 246, True)
    assert find_pinned(rt, addr + 255) == (addr + 255, 1, True)
    assert find_pinned(rt, addr + 256) is None
    # a device address is found only when asked for, and translated to the host address
    assert find_pinned(rt, dev + 10) is None
    assert find_pinned(rt, dev + 10, device_addresses=True) == (addr + 10, 246, True)
    assert find_pinned(rt, dev + 256, device_addresses=True) is None
    assert device_pointer(host, dev + 16) == 240
    assert device_pointer(host, dev + 256) is None
    assert device_pointer(host, addr + 16) is None
    entry = host.pins.containing(addr, 256)
    assert entry.base == addr and entry.size == 256 and entry.dev_ptr == dev
    assert entry.external is False and entry.writable is True and entry.users == 1
    host.unlock(buf)
    assert hooks.unlocks == [addr], "memory pyoffload pinned itself is unpinned"
    assert hooks.queries == [addr], "the vendor is asked whether it pinned the memory already"
    assert hooks.handles == {host.handle}
    _no_pins(host)
    assert not pyoffload.is_pinned(addr)
    assert find_pinned(rt, addr) is None and device_pointer(host, dev) is None
    with pytest.raises(InvalidArgumentError) as err:
        host.unlock(buf)
    assert str(err.value) == f"INVALID_ARGUMENT: unlock: host range 0x{addr:x}+256 is not locked for {host!r}"


def test_nested_locks_add_users_to_the_outer_range(host, hooks):
    buf = np.zeros(1024, dtype=np.uint8)
    addr = buf.ctypes.data
    outer = host.lock(buf)
    assert host.lock(buf[100:200]) == outer + 100
    assert host.lock(buf[100:200]) == outer + 100, "the same sub-range twice is two users"
    assert host.lock(buf) == outer
    assert hooks.locks == [(addr, 1024)], "a nested lock pins nothing new"
    entry = host.pins.containing(addr, 1024)
    assert entry.users == 4 and len(host.pins) == 1
    assert [(a - addr, n) for a, n, _ in entry.holds] == [(0, 1024), (100, 100), (100, 100), (0, 1024)]
    # a sub-range never locked by itself releases nothing
    with pytest.raises(InvalidArgumentError, match="not locked itself") as err:
        host.unlock(buf[100:150])
    assert err.value.errc is Errc.INVALID_ARGUMENT
    assert entry.users == 4
    host.unlock(buf)
    host.unlock(buf[100:200])
    assert entry.users == 2 and hooks.unlocks == []
    assert [(a - addr, n) for a, n, _ in entry.holds] == [(100, 100), (0, 1024)]
    host.unlock(buf)
    assert [(a - addr, n) for a, n, _ in entry.holds] == [(100, 100)]
    with pytest.raises(InvalidArgumentError, match="not locked itself"):
        host.unlock(buf)
    assert pyoffload.is_pinned(addr + 1023), "the range stays pinned while a user holds it"
    host.unlock(buf[100:200])
    assert hooks.unlocks == [addr], "unpinned once, at the base of the range, by its last user"
    _no_pins(host)


def test_partial_overlaps_are_refused(host, hooks):
    buf = np.zeros(1024, dtype=np.uint8)
    host.lock(buf[256:512])
    base = buf.ctypes.data
    for lo, hi in [(0, 257), (511, 600), (0, 1024), (200, 300)]:
        with pytest.raises(InvalidArgumentError) as err:
            host.lock(buf[lo:hi])
        assert err.value.errc is Errc.INVALID_ARGUMENT
        assert str(err.value) == (
            f"INVALID_ARGUMENT: lock: range 0x{base + lo:x}+{hi - lo} would extend the locked "
            f"range 0x{base + 256:x}+256"
        )
    assert len(hooks.locks) == 1 and host.pins.containing(buf.ctypes.data + 256, 256).users == 1
    # adjacent ranges are separate entries
    host.lock(buf[0:256])
    host.lock(buf[512:1024])
    assert len(host.pins) == 3 and len(host.pins.by_dev) == 3
    for lo, hi in [(0, 256), (256, 512), (512, 1024)]:
        host.unlock(buf[lo:hi])
    _no_pins(host)


def test_lock_refuses_allocations_and_empty_buffers(host):
    a = host.alloc(64, kind=AllocKind.HOST)
    try:
        with pytest.raises(InvalidArgumentError, match=r"lock: <pyoffload\.Allocation HOST .* is an allocation"):
            host.lock(a)
    finally:
        a.free()
    with pytest.raises(OffloadError) as err:
        host.lock(bytearray())
    assert err.value.errc is Errc.INVALID_SIZE and str(err.value) == "INVALID_SIZE: lock: the buffer is empty"
    with pytest.raises(TypeError, match=r"^lock: expected an Allocation, a pointer \(int\) or a host buffer"):
        host.lock(42)
    with pytest.raises(TypeError, match=r"^unlock: expected an Allocation, a pointer \(int\) or a host buffer"):
        host.unlock([1, 2])
    _no_pins(host)
    # one byte is a buffer like any other
    one = bytearray(1)
    host.lock(one)
    assert pyoffload.is_pinned(one)
    host.unlock(one)
    _no_pins(host)


def test_read_only_buffers(host, hooks):
    data = bytes(range(64))
    with pytest.raises(InvalidArgumentError, match=r"lock: the buffer \(bytes\) is read-only"):
        host.lock(data)
    dev = host.lock(data, read_only=True)
    addr = dev - hooks.OFFSET
    assert find_pinned(host.rt, addr + 8) == (addr + 8, 56, False)
    assert find_pinned(host.rt, dev + 8, device_addresses=True) == (addr + 8, 56, False)
    out = np.zeros(16, np.uint8)
    pyoffload.memcpy(out, addr + 8, 16)  # reading through it works
    assert bytes(out) == data[8:24]
    with pytest.raises(InvalidArgumentError, match="locked read-only"):
        pyoffload.memcpy(addr, out, 16)
    with pytest.raises(InvalidArgumentError, match="locked read-only"):
        pyoffload.memcpy(dev, out, 16)
    assert pyoffload.is_pinned(data), "a read-only buffer can be asked about"
    host.unlock(data)
    assert hooks.unlocks == [addr]
    _no_pins(host)


def test_a_writable_lock_makes_a_read_only_range_writable(host, hooks):
    buf = np.zeros(64, np.uint8)
    ro = buf.view()
    ro.flags.writeable = False
    addr = buf.ctypes.data
    host.lock(ro, read_only=True)
    assert find_pinned(host.rt, addr)[2] is False
    host.lock(ro[8:16], read_only=True)  # another read-only user: still read-only
    assert find_pinned(host.rt, addr)[2] is False
    with pytest.raises(InvalidArgumentError, match="locked read-only"):
        pyoffload.memcpy(addr + 40, np.full(8, 7, np.uint8), 8)
    host.unlock(ro[8:16])
    host.lock(buf[16:32])  # a writable user of a sub-range
    assert find_pinned(host.rt, addr)[2] is True
    pyoffload.memcpy(addr + 40, np.full(8, 7, np.uint8), 8)
    assert list(buf[40:48]) == [7] * 8
    # a read-only lock of a writable range leaves it writable
    host.lock(ro[0:8], read_only=True)
    assert find_pinned(host.rt, addr)[2] is True
    host.lock(buf[0:8], read_only=True)  # read_only=True of a writable buffer: still writable memory
    assert find_pinned(host.rt, addr)[2] is True
    for b in (ro, buf[16:32], ro[0:8], buf[0:8]):
        host.unlock(b)
    _no_pins(host)
    # read_only=True of a writable buffer on its own pins writable memory
    host.lock(buf, read_only=True)
    assert find_pinned(host.rt, addr)[2] is True
    host.unlock(buf)


def test_copies_past_the_end_of_a_pinned_range(host, hooks):
    buf = np.arange(256, dtype=np.uint8)
    addr = buf.ctypes.data
    host.lock(buf[0:128])
    out = np.zeros(256, np.uint8)
    # from an interior pointer: exactly the bytes left work, one more does not
    pyoffload.memcpy(out, addr + 100, 28)
    assert list(out[:28]) == list(range(100, 128))
    with pytest.raises(OffloadError, match="reads past the end") as err:
        pyoffload.memcpy(out, addr + 100, 29)
    assert err.value.errc is Errc.INVALID_SIZE
    with pytest.raises(OffloadError, match="writes past the end") as err:
        pyoffload.memcpy(addr + 120, out, 9)
    assert err.value.errc is Errc.INVALID_SIZE
    # no size: the sides must match, here the bytes left in the range
    out[:] = 0
    with pytest.raises(OffloadError, match="without a size") as err:
        pyoffload.memcpy(out, addr + 120)
    assert err.value.errc is Errc.INVALID_SIZE and not out.any()
    pyoffload.memcpy(out[:8], addr + 120)
    assert list(out[:8]) == list(range(120, 128)) and not out[8:].any()
    dev = addr + hooks.OFFSET
    with pytest.raises(OffloadError, match="reads past the end"):
        pyoffload.memcpy(out, dev + 100, 29)
    pyoffload.memcpy(out, dev + 127, 1)
    assert out[0] == 127
    host.unlock(buf[0:128])
    with pytest.raises(OffloadError) as err:
        pyoffload.memcpy(out, addr + 100, 1)
    assert err.value.errc is Errc.NOT_FOUND


def test_host_allocations_are_external_ranges(host, hooks):
    a = host.alloc(4096, kind=AllocKind.HOST)
    try:
        assert pyoffload.is_pinned(a.ptr) and pyoffload.is_pinned(a.ptr + 4095)
        assert not pyoffload.is_pinned(a.ptr + 4096)
        view = a.view()
        assert host.lock(view[1024:2048]) == a.ptr + 1024, "HOST memory is its own device address"
        assert hooks.locks == []
        entry = host.pins.containing(a.ptr + 1024, 1024)
        assert entry.external and entry.base == a.ptr and entry.size == 4096 and entry.dev_ptr == a.ptr
        assert entry.writable
        # the whole allocation is one entry: another part of it adds a user
        assert host.lock(view[0:16]) == a.ptr
        assert entry.users == 2 and len(host.pins) == 1
        host.unlock(view[1024:2048])
        host.unlock(view[0:16])
        assert hooks.unlocks == [], "HOST memory is never unlocked by pyoffload"
        _no_pins(host)
        # the allocation is still pinned without any lock
        assert pyoffload.is_pinned(a.ptr + 100)
        del view, entry
        gc.collect()
    finally:
        a.free()
    assert not pyoffload.is_pinned(a.ptr)


def test_vendor_pinned_memory_is_external(host, hooks):
    buf = np.zeros(4096, np.uint8)
    addr = buf.ctypes.data
    hooks.vendor.append((addr + 1024, 2048, 0x7000_0000))
    # a lock inside it takes the vendor's range and device addresses
    assert host.lock(buf[2048:2100]) == 0x7000_0000 + 1024
    assert hooks.locks == [] and hooks.queries == [addr + 2048] and hooks.handles == {host.handle}
    entry = host.pins.containing(addr + 2048, 52)
    assert (entry.base, entry.size, entry.dev_ptr, entry.external) == (addr + 1024, 2048, 0x7000_0000, True)
    assert find_pinned(host.rt, 0x7000_0010, device_addresses=True) == (addr + 1024 + 16, 2032, True)
    # up to the last byte of the vendor's range, but not one past it
    assert host.lock(buf[1024:3072]) == 0x7000_0000
    with pytest.raises(InvalidArgumentError, match="would extend"):
        host.lock(buf[3000:3073])
    host.unlock(buf[1024:3072])
    host.unlock(buf[2048:2100])
    assert hooks.unlocks == []
    _no_pins(host)
    # a lock that starts inside the vendor's range and runs past it is refused
    with pytest.raises(InvalidArgumentError) as err:
        host.lock(buf[3000:3073])
    assert str(err.value) == (
        f"INVALID_ARGUMENT: lock: range 0x{addr + 3000:x}+73 extends beyond externally "
        f"pinned memory 0x{addr + 1024:x}+2048"
    )
    with pytest.raises(InvalidArgumentError, match="extends beyond externally pinned memory"):
        host.lock(buf[1024:3073])
    _no_pins(host)
    # exactly the vendor's range is fine
    assert host.lock(buf[1024:3072]) == 0x7000_0000
    host.unlock(buf[1024:3072])
    # outside it, pyoffload pins the memory itself
    assert host.lock(buf[0:1024]) == addr + hooks.OFFSET
    host.unlock(buf[0:1024])
    assert hooks.locks == [(addr, 1024)] and hooks.unlocks == [addr]
    _no_pins(host)


def test_is_pinned_arguments(host, hooks):
    buf = bytearray(32)
    host.lock(buf)
    try:
        assert pyoffload.is_pinned(buf) and pyoffload.is_pinned(memoryview(buf)[31:])
        with pytest.raises(TypeError, match=r"^is_pinned: expected .* got True \(bool\)"):
            pyoffload.is_pinned(True)  # a bool is not an address
        with pytest.raises(TypeError, match=r"^is_pinned: expected .* got 1\.5 \(float\)"):
            pyoffload.is_pinned(1.5)
        assert not pyoffload.is_pinned(0)
    finally:
        host.unlock(buf)


def test_is_pinned_without_a_live_runtime(fresh_runtime):
    buf = np.zeros(16, np.uint8)
    assert pyoffload.is_pinned(buf.ctypes.data) is False  # not initialised: nothing is pinned
    host = pyoffload.host_device()
    host.lock(buf)
    assert pyoffload.is_pinned(buf.ctypes.data) is True
    pyoffload.shutdown()
    assert pyoffload.is_pinned(buf.ctypes.data) is False
