"""A sorted set of 64-bit addresses with floor queries: the index under :class:`RangeMap`.

The layout of sortedcontainers' ``SortedList``: the addresses in blocks of at most ``2 * LOAD``,
with each block's maximum in a list of its own, so that a floor query is two binary searches
(one over the maxima, one in a block) and an insertion moves at most one block's items.  Typed
Python: compiled where a compiler is available (``setup.py``), interpreted otherwise; one source.

Every mutation leaves the structure whole if it fails half-way (a ``MemoryError`` while a block is
split, a ``KeyboardInterrupt``): the new block is made and linked before the old one is cut.
Not thread-safe by itself: its owner's lock guards it (``RangeMap.lock``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

LOAD = 512
TOP = 1 << 64

__all__ = ["LOAD", "SortedIndex"]


def _address(x: object) -> int:
    if type(x) is not int:
        if not isinstance(x, int) or isinstance(x, bool):
            raise TypeError(f"an address must be an int, not {type(x).__name__}")
        x = int(x)
    if not 0 <= x < TOP:
        raise OverflowError(f"address {x} is outside the 64-bit address space")
    return x


def _query(x: object) -> int:
    """A query bound: any int (below 0 and at or above 2**64 are answered as such)."""
    if type(x) is not int:
        if not isinstance(x, int) or isinstance(x, bool):
            raise TypeError(f"an address must be an int, not {type(x).__name__}")
        x = int(x)
    return x


class SortedIndex:
    """A sorted set of 64-bit addresses with floor queries (blocks of at most ``2 * LOAD``)."""

    __slots__ = ("_blocks", "_maxes", "_len")

    def __init__(self) -> None:
        self._blocks: list[list[int]] = []  # non-empty, sorted, each at most 2 * LOAD long
        self._maxes: list[int] = []  # the last item of each block
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, x: int, /) -> bool:
        """Insert ``x``; ``False`` if it was there already."""
        x = _address(x)
        n = self._len + 1  # made before the first change: the update below allocates nothing
        maxes = self._maxes
        if not maxes:
            self._blocks.append([x])
            try:
                maxes.append(x)
            except BaseException:
                del self._blocks[-1]
                raise
            self._len = n
            return True
        pos = bisect_left(maxes, x)
        if pos == len(maxes):
            pos -= 1
            block = self._blocks[pos]
            block.append(x)
            maxes[pos] = x
        else:
            block = self._blocks[pos]
            i = bisect_left(block, x)
            if block[i] == x:
                return False
            block.insert(i, x)
        self._len = n
        if len(block) > 2 * LOAD:
            self._split(pos)
        return True

    def _split(self, pos: int) -> None:
        """Move the upper half of block ``pos`` into a new block after it."""
        block = self._blocks[pos]
        lower, upper = block[:LOAD], block[LOAD:]
        self._maxes.insert(pos, lower[-1])
        try:
            self._blocks.insert(pos + 1, upper)
        except BaseException:
            del self._maxes[pos]
            raise
        self._blocks[pos] = lower  # replacing allocates nothing (deleting a slice would)

    def discard(self, x: int, /) -> bool:
        """Remove ``x``; ``False`` if it was not there."""
        x = _address(x)
        maxes = self._maxes
        pos = bisect_left(maxes, x)
        if pos == len(maxes):
            return False
        block = self._blocks[pos]
        i = bisect_left(block, x)
        if block[i] != x:
            return False
        n = self._len - 1
        del block[i]  # one item: allocates nothing
        self._len = n
        if not block:
            del self._blocks[pos]
            del maxes[pos]
        elif i == len(block):
            maxes[pos] = block[-1]
        return True

    def update(self, removed: Iterable[int], added: Iterable[int], /) -> None:
        """Discard every address of ``removed``, then add every one of ``added``."""
        for x in removed:
            self.discard(x)
        for x in added:
            self.add(x)

    def floor(self, x: int, /) -> int | None:
        """The largest address ``<= x``, or ``None``."""
        x = _query(x)
        if x < 0:
            return None
        maxes = self._maxes
        if not maxes:
            return None
        pos = bisect_left(maxes, x)
        if pos == len(maxes):
            return maxes[-1]
        block = self._blocks[pos]
        i = bisect_right(block, x)
        if i:
            return block[i - 1]
        return maxes[pos - 1] if pos else None

    def between(self, lo: int, hi: int, /) -> list[int]:
        """The addresses ``b`` with ``lo <= b < hi``, ascending."""
        lo, hi = _query(lo), _query(hi)
        out: list[int] = []
        if hi <= 0 or lo >= TOP or hi <= lo:
            return out
        lo = max(lo, 0)
        maxes, blocks = self._maxes, self._blocks
        for pos in range(bisect_left(maxes, lo), len(maxes)):
            block = blocks[pos]
            start = bisect_left(block, lo) if block[0] < lo else 0
            if block[-1] < hi:
                out.extend(block[start:])
            else:
                out.extend(block[start : bisect_left(block, hi)])
                break
        return out

    def blocks(self) -> list[list[int]]:
        """A copy of the blocks (for tests of the layout)."""
        return [list(b) for b in self._blocks]

    def maxes(self) -> list[int]:
        return list(self._maxes)

    def clear(self) -> None:
        self._blocks = []
        self._maxes = []
        self._len = 0
