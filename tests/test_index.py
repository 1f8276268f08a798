"""``pyoffload.addresses.sorted_index.SortedIndex``, the sorted address index under ``RangeMap``, against a model.

Random operation sequences (seeded, bounded) over small and full-width 64-bit addresses compare
every answer and the block layout with a sorted Python list; the edges are tested one by one:
queries below 0 and at or above ``2**64``, addresses that do not fit, block splits and merges,
and additions that run out of memory at each of their allocations in turn.
"""

from __future__ import annotations

import bisect
import random

import pytest

from pyoffload.addresses.sorted_index import LOAD, SortedIndex

TOP = 2**64


def check_layout(s: SortedIndex, model: list[int]) -> None:
    blocks, maxes = s.blocks(), s.maxes()
    assert [b for blk in blocks for b in blk] == model
    assert len(s) == len(model)
    assert all(blk and len(blk) <= 2 * LOAD for blk in blocks), [len(b) for b in blocks]
    assert maxes == [blk[-1] for blk in blocks]


def model_floor(model: list[int], x: int) -> int | None:
    i = bisect.bisect_right(model, x)
    return model[i - 1] if i and x >= 0 else None


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_match_a_sorted_list(seed: int) -> None:
    rng = random.Random(seed)
    s, model = SortedIndex(), []
    for step in range(6000):
        x = rng.randrange(TOP) if rng.random() < 0.1 else rng.randrange(4 * LOAD * 8)
        op = rng.random()
        if op < 0.55:
            assert s.add(x) is (x not in model)
            if x not in model:
                bisect.insort(model, x)
        elif op < 0.85 and model:
            y = rng.choice(model) if rng.random() < 0.7 else x
            present = y in model
            assert s.discard(y) is present
            if present:
                model.remove(y)
        else:
            q = rng.choice([x, x + 1, x - 1, -1, TOP, TOP - 1, 2**70])
            assert s.floor(q) == model_floor(model, q), q
            lo, hi = sorted((rng.randrange(-5, TOP), rng.randrange(-5, TOP)))
            assert s.between(lo, hi) == [b for b in model if lo <= b < hi]
        if step % 500 == 0:
            check_layout(s, model)
    check_layout(s, model)


def test_update_removes_then_adds() -> None:
    s = SortedIndex()
    s.update([], range(0, 30, 3))
    s.update([3, 6, 7], [6, 100])  # 7 is absent: ignored; 6 leaves and comes back
    assert s.blocks() == [[0, 6, 9, 12, 15, 18, 21, 24, 27, 100]]


def test_blocks_split_above_2_load_and_close_when_empty() -> None:
    s = SortedIndex()
    for i in range(2 * LOAD):
        s.add(i)
    assert [len(b) for b in s.blocks()] == [2 * LOAD]
    s.add(2 * LOAD)
    assert [len(b) for b in s.blocks()] == [LOAD, LOAD + 1]
    assert s.maxes() == [LOAD - 1, 2 * LOAD]
    for i in range(LOAD):
        assert s.discard(i)
    assert [len(b) for b in s.blocks()] == [LOAD + 1], "an emptied block is dropped"
    assert s.floor(LOAD - 1) is None and s.floor(LOAD) == LOAD
    s.clear()
    assert len(s) == 0 and s.blocks() == [] and s.floor(TOP) is None


def test_query_edges() -> None:
    s = SortedIndex()
    assert s.floor(0) is None and s.between(0, TOP) == []
    for x in (0, 1, TOP - 1):
        s.add(x)
    assert s.floor(-1) is None and s.floor(-(2**80)) is None
    assert s.floor(0) == 0 and s.floor(5) == 1
    assert s.floor(TOP - 2) == 1 and s.floor(TOP - 1) == TOP - 1
    assert s.floor(TOP) == TOP - 1 and s.floor(2**100) == TOP - 1
    assert s.between(-10, TOP - 1) == [0, 1], "the upper bound is excluded"
    assert s.between(-10, TOP) == [0, 1, TOP - 1] == s.between(0, 2**90)
    assert s.between(TOP, 2**90) == [] and s.between(5, -1) == []


@pytest.mark.parametrize("bad", [-1, TOP, 2**80])
def test_addresses_outside_64_bits_are_refused(bad: int) -> None:
    s = SortedIndex()
    with pytest.raises(OverflowError):
        s.add(bad)
    with pytest.raises(OverflowError):
        s.discard(bad)
    assert len(s) == 0


def test_non_integers_are_refused() -> None:
    s = SortedIndex()
    with pytest.raises(TypeError):
        s.add("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.floor(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.update([1], None)  # type: ignore[arg-type]


class _FailingInsert(list):  # type: ignore[type-arg]
    """A list whose next insert fails, as a MemoryError in the middle of a block split would."""

    def insert(self, i: int, x: object) -> None:  # type: ignore[override]
        raise MemoryError("injected")


def test_a_split_that_fails_leaves_the_index_whole() -> None:
    """Finding: a block split that failed with MemoryError left the index broken (in the C
    version: a heap overflow on the next insertion)."""
    s, model = SortedIndex(), []
    for x in range(2 * LOAD):
        s.add(x * 8)
        model.append(x * 8)
    s._blocks = _FailingInsert(s._blocks)  # the next split's insertion of the new block fails
    with pytest.raises(MemoryError):
        s.add(2 * LOAD * 8)  # the item is in; the split is not made
    model.append(2 * LOAD * 8)
    s._blocks = list(s._blocks)
    assert s.floor(10**6) == model[-1] and len(s) == len(model)
    for x in range(2 * LOAD + 1, 4 * LOAD):
        s.add(x * 8)
        model.append(x * 8)
    check_layout(s, model)
    assert s.between(0, 2**64) == model


def add_without_memory(s: SortedIndex, x: int, start: int) -> bool:
    """``s.add(x)`` with every allocation from the ``start``-th on failing (CPython's own hook,
    which reaches allocations inside list operations that a subclass cannot)."""
    testcapi = pytest.importorskip("_testcapi")
    add, restore = s.add, testcapi.remove_mem_hooks
    testcapi.set_nomemory(start)
    try:
        return add(x)
    finally:
        restore()


def check_whole(s: SortedIndex, before: list[int], x: int) -> list[int]:
    """The index is sorted, without duplicates, its maxima and length agree with its blocks, and it
    holds ``before`` with or without ``x``; the blocks may be over-full.  Returns its contents."""
    blocks, maxes = s.blocks(), s.maxes()
    flat = [b for blk in blocks for b in blk]
    assert flat in (before, sorted([*before, x])), (len(flat), len(before), [len(b) for b in blocks][-3:])
    assert len(s) == len(flat) and all(blocks) and maxes == [blk[-1] for blk in blocks]
    return flat


@pytest.mark.parametrize("nblocks", [1, 8], ids=["split", "split-and-grow"])
@pytest.mark.parametrize("where", ["top", "upper-half", "lower-half", "bottom"])
def test_an_add_that_runs_out_of_memory_leaves_the_index_whole(nblocks: int, where: str) -> None:
    """Adding to a full block splits it; each allocation of the add fails in turn (MemoryError)
    until none does: the index stays whole every time, and the adds after it work."""
    model = [2 * i for i in range((nblocks - 1) * LOAD + 2 * LOAD)]  # ascending: the last block full
    last_block = None
    failures = 0
    for start in range(200):
        s = SortedIndex()
        s.update([], model)
        last_block = last_block or s.blocks()[-1]
        assert len(last_block) == 2 * LOAD
        # bases are even: an odd x is new; one that lands at slot LOAD goes to the upper half
        x = {
            "top": last_block[-1] + 1,
            "upper-half": last_block[LOAD - 1] + 1,
            "lower-half": last_block[LOAD - 2] + 1,
            "bottom": last_block[0] + 1,
        }[where]
        try:
            add_without_memory(s, x, start)
        except MemoryError:
            failures += 1
            flat = check_whole(s, model, x)
        else:
            check_layout(s, sorted([*model, x]))
            break
        more = [y for y in range(last_block[0] + 3, last_block[-1], 8) if y not in flat]
        for y in more:
            assert s.add(y)
        check_layout(s, sorted({*flat, *more}))
    else:
        raise AssertionError("the add kept failing")
    assert failures, "no allocation failed"
