"""The caching allocator: one per (context, device, kind), in front of every backend's allocator.

After CuPy's ``MemoryPool`` and PyTorch's caching allocator, in Python and kept cheap:

* Requests are rounded up to 512 bytes.  Requests up to 1 MiB are carved out of 2 MiB segments;
  larger ones get a segment of their own (rounded up to 2 MiB).  A segment is one call of the
  backend's ``data_alloc_impl``; it goes back to the backend only through :meth:`trim`, a limit,
  or an out-of-memory retry.
* Freed blocks go on a free list of their exact size: the common alloc/free of one size is a
  list pop and a list append.  Only when no free block of the size fits does the allocator split
  the best-fitting larger block, and, before asking the backend for a new segment, coalesce free
  neighbours.
* Stream order: a block freed on a queue (``Queue.free_async``) carries that queue and the
  sequence number of the free.  It is reused at once by later work on the same queue (the queue
  is in order), and elsewhere only once the queue has passed that point; a plain ``free`` has
  already waited, so its blocks are free for everyone.
* On out-of-memory the allocator releases its cached segments (and those of its siblings on the
  device, through ``on_exhausted``) and retries once.
* Statistics, a reserve limit, a request-size bound (``PYOFFLOAD_POOL_THRESHOLD``) and an on/off
  switch are public (``pyoffload.MemoryPool``).

Requests above the bound, or any request while the pool is off, are passed straight through to
the backend, one segment each, released as soon as they are freed.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Any

from ._fastpath import BlockBase, Lock, PoolBase
from .errors import OutOfResourcesError

ROUND = 512
SMALL_REQUEST = 1 << 20
SMALL_SEGMENT = 2 << 20
LARGE_ROUND = 2 << 20


def rounded(size: int) -> int:
    return (size + ROUND - 1) & ~(ROUND - 1)


class Segment:
    __slots__ = ("base", "size", "pooled")

    def __init__(self, base: int, size: int, pooled: bool) -> None:
        self.base = base
        self.size = size
        self.pooled = pooled


class Block(BlockBase):
    """A piece of a segment: in use by one allocation, or free on its size's list.  The fields
    are C members (``BlockBase``), read and written by the C fast path too."""

    __slots__ = ()

    def __init__(self, ptr: int, size: int, segment: Segment) -> None:
        self.ptr = ptr
        self.size = size
        self.segment = segment
        self.pooled = segment.pooled  # read by the C fast path, which frees pooled blocks only
        self.prev = None
        self.next = None
        self.free = False
        self.queue = None  # the queue a stream-ordered free was made on, or None
        self.seq = 0

    def usable_by(self, queue: Any) -> bool:
        q = self.queue
        return q is None or q is queue or q.done >= self.seq


@dataclasses.dataclass
class PoolStats:
    """A snapshot of one pool.  Bytes are the pool's rounded block sizes."""

    in_use_bytes: int
    cached_bytes: int
    reserved_bytes: int
    peak_in_use_bytes: int
    peak_reserved_bytes: int
    segments: int
    allocations: int
    cache_hits: int
    backend_allocs: int
    backend_frees: int


class CachingAllocator(PoolBase):
    """Cached blocks of one (context, device, kind).  The hot fields (free lists, sizes, lock,
    request bound, in-use counters) are C members (``PoolBase``): the C fast path
    (:mod:`pyoffload._fastpath`) serves the common request from them, under the rules of
    :meth:`take` and :meth:`give` below, and leaves everything else to them."""

    def __init__(self, backend_alloc: Callable[[int], int], backend_free: Callable[[int], None],
                 max_request: int | None, on_exhausted: Callable[[], int] | None = None) -> None:
        self._alloc = backend_alloc
        self.backend_free = backend_free
        self.max_request = max_request  # None: every size; 0: pool off
        self.limit: int | None = None  # most bytes reserved from the backend; None: no limit
        self.on_exhausted = on_exhausted
        self._lock = Lock()
        self._lists = {}  # free blocks by size; a size's list may be empty (the fast path keeps it)
        self._sizes = []  # sizes with a non-empty list, sorted (for best fit)
        self._segments: dict[int, Segment] = {}
        self.in_use = 0
        self.reserved = 0
        self.peak_in_use = 0
        self.peak_reserved = 0
        self.allocations = 0
        self.hits = 0
        self.backend_allocs = 0
        self.backend_frees = 0

    @property
    def enabled(self) -> bool:
        return self.max_request != 0

    # -- the hot path -------------------------------------------------------------------------

    def take(self, size: int, queue: Any = None) -> Block:
        """A block of at least ``size`` bytes, usable by work on ``queue`` (``None``: right away)."""
        bound = self.max_request
        if bound is not None and (bound == 0 or size > bound):
            return self._unpooled(size)
        need = (size + ROUND - 1) & ~(ROUND - 1)
        lock = self._lock
        lock.acquire()  # not `with`: a third cheaper, and this is counted in frames and timed
        try:
            free = self._lists.get(need)
            if free:
                block = free[-1]
                if block.queue is None or block.usable_by(queue):
                    free.pop()
                    if not free:
                        del self._lists[need]
                        del self._sizes[bisect_left(self._sizes, need)]
                    block.free = False
                    block.queue = None
                    self.in_use += need
                    self.allocations += 1
                    self.hits += 1
                    if self.in_use > self.peak_in_use:
                        self.peak_in_use = self.in_use
                    return block
            fit = self._best_fit(need, queue)
            if fit is not None:
                return fit
        finally:
            lock.release()
        return self._grow(need, queue)

    def give(self, block: Block, queue: Any = None, seq: int = 0) -> None:
        """Return a block; ``queue``/``seq``: freed in that queue's order (not yet complete)."""
        segment = block.segment
        if not segment.pooled:
            self._release_unpooled(block)
            return
        lock = self._lock
        lock.acquire()
        try:
            block.queue = queue
            block.seq = seq
            self.in_use -= block.size
            block.free = True
            free = self._lists.get(block.size)
            if free:  # written out: the common case is counted in frames
                free.append(block)
            else:
                self._put(block)
        finally:
            lock.release()

    # -- the slow path ------------------------------------------------------------------------

    def _put(self, block: Block) -> None:
        block.free = True
        free = self._lists.get(block.size)
        if free:
            free.append(block)
            return
        if free is None:
            self._lists[block.size] = [block]
        else:  # kept, empty, by the fast path (see _lists)
            free.append(block)
        insort(self._sizes, block.size)

    def _unlist(self, block: Block) -> None:
        free = self._lists[block.size]
        free.remove(block)
        if not free:
            del self._lists[block.size]
            del self._sizes[bisect_left(self._sizes, block.size)]

    def _best_fit(self, need: int, queue: Any) -> Block | None:
        """Split the smallest usable free block larger than ``need`` (lock held)."""
        sizes = self._sizes
        for i in range(bisect_left(sizes, need), len(sizes)):
            size = sizes[i]
            if need <= SMALL_REQUEST < size and size - need > SMALL_SEGMENT:
                break  # do not carve small requests out of large segments
            for block in reversed(self._lists[size]):
                if block.usable_by(queue):
                    self._unlist(block)
                    return self._use(block, need)
        return None

    def _use(self, block: Block, need: int) -> Block:
        """Mark ``block`` in use for ``need`` bytes, splitting off the rest (lock held)."""
        if block.size > need:
            rest = Block(block.ptr + need, block.size - need, block.segment)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            rest.queue, rest.seq = block.queue, block.seq
            block.size = need
            self._put(rest)
        block.free = False
        block.queue = None
        self.in_use += need
        self.allocations += 1
        if self.in_use > self.peak_in_use:
            self.peak_in_use = self.in_use
        return block

    def _coalesce(self) -> int:
        """Merge free neighbours with the same stream tag (lock held); the number of merges."""
        merged = 0
        for size in list(self._sizes):
            for block in list(self._lists.get(size, ())):
                if not block.free:
                    continue
                nxt = block.next
                while nxt is not None and nxt.free and nxt.queue is block.queue:
                    self._unlist(block)
                    self._unlist(nxt)
                    nxt.free = False  # merged away: no longer a block of its own
                    block.size += nxt.size
                    block.seq = max(block.seq, nxt.seq)
                    block.next = nxt.next
                    if nxt.next is not None:
                        nxt.next.prev = block
                    self._put(block)
                    merged += 1
                    nxt = block.next
        return merged

    def _grow(self, need: int, queue: Any) -> Block:
        """Coalesce and retry, else a new segment from the backend (out of memory: release the
        cache, retry once)."""
        with self._lock:
            if self._coalesce():
                block = self._best_fit(need, queue)
                if block is not None:
                    return block
        seg_size = SMALL_SEGMENT if need <= SMALL_REQUEST else -(-need // LARGE_ROUND) * LARGE_ROUND
        if self.limit is not None and self.reserved + seg_size > self.limit:
            self.trim()
            if self.reserved + seg_size > self.limit:
                raise OutOfResourcesError(
                    f"memory pool limit of {self.limit} bytes reached ({self.reserved} reserved, "
                    f"{seg_size} more needed)")
        base = self._backend_alloc(seg_size)
        with self._lock:
            segment = Segment(base, seg_size, True)
            self._segments[base] = segment
            self.reserved += seg_size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            return self._use(Block(base, seg_size, segment), need)

    def _backend_alloc(self, size: int) -> int:
        try:
            ptr = self._alloc(size)
        except OutOfResourcesError:
            # LLVM's MemoryManagerTy, CuPy: free every cached block of the device, retry once.
            released = self.trim()
            if self.on_exhausted is not None:
                released += self.on_exhausted()
            if not released:
                raise
            ptr = self._alloc(size)
        self.backend_allocs += 1
        return ptr

    def _unpooled(self, size: int) -> Block:
        base = self._backend_alloc(size)
        with self._lock:
            self.reserved += size
            self.in_use += size
            self.allocations += 1
            self.peak_reserved = max(self.peak_reserved, self.reserved)
            self.peak_in_use = max(self.peak_in_use, self.in_use)
        return Block(base, size, Segment(base, size, False))

    def _release_unpooled(self, block: Block) -> None:
        self.backend_free(block.ptr)
        with self._lock:
            self.backend_frees += 1
            self.reserved -= block.size
            self.in_use -= block.size

    # -- the public side ----------------------------------------------------------------------

    def trim(self, keep: int = 0) -> int:
        """Give cached segments that are wholly free (and complete) back to the backend until at
        most ``keep`` bytes stay cached; return the bytes released."""
        with self._lock:
            self._coalesce()
            victims = []
            cached = self.reserved - self.in_use
            for segment in list(self._segments.values()):
                if cached <= keep:
                    break
                block = self._whole_free(segment)
                if block is not None:
                    self._unlist(block)
                    del self._segments[segment.base]
                    victims.append(segment)
                    cached -= segment.size
        released = 0
        for segment in victims:
            self.backend_free(segment.base)
            released += segment.size
        with self._lock:
            self.reserved -= released
            self.backend_frees += len(victims)
        return released

    def _whole_free(self, segment: Segment) -> Block | None:
        for block in self._lists.get(segment.size, ()):
            if block.segment is segment and block.ptr == segment.base and block.usable_by(None):
                return block
        return None

    def release_all(self) -> list[int]:
        """Forget every segment and return their bases (teardown frees them)."""
        with self._lock:
            bases = list(self._segments)
            self._segments.clear()
            self._lists.clear()
            self._sizes.clear()
            self.reserved = self.in_use = 0
        return bases

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                in_use_bytes=self.in_use, cached_bytes=self.reserved - self.in_use, reserved_bytes=self.reserved,
                peak_in_use_bytes=self.peak_in_use, peak_reserved_bytes=self.peak_reserved,
                segments=len(self._segments), allocations=self.allocations, cache_hits=self.hits,
                backend_allocs=self.backend_allocs, backend_frees=self.backend_frees,
            )
