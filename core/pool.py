"""The caching allocator: one per (context, device, kind), in front of every backend's allocator.

After CuPy's ``MemoryPool`` and PyTorch's caching allocator, in Python and kept cheap:

* Requests are rounded up to 512 bytes.  Requests up to 1 MiB are carved out of 2 MiB segments;
  larger ones get a segment of their own (rounded up to 2 MiB).  A segment is one call of the
  backend's ``data_alloc_impl``; it goes back to the backend only through :meth:`trim`, a limit,
  or an out-of-memory retry.
* Freed blocks go on a free list of their exact size: the common alloc/free of one size is a
  list pop and a list append (a size's list stays, empty, until a miss sweeps empty lists out).
  Only when no free block of the size fits does the allocator split the best-fitting larger
  block, and, before asking the backend for a new segment, coalesce free neighbours.
* A free that leaves more than ``release_threshold`` bytes cached trims back to it (a pool made
  by ``create_pool`` and then destroyed has a threshold of 0: its blocks go back as they are
  freed).
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

Locking: each allocator's fields, and the fields of its blocks and segments, are guarded by its
one lock (``_lock``, see :mod:`pyoffload.locks`; a context's allocators share the address
registry's, so that an allocation takes its block and records it in one section).  It is never
held while the backend allocates or frees: a new segment's bytes are reserved under the lock
first (so that threads racing for the last bytes under a ``limit`` cannot all get them), and given
back if the backend fails.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Any

from .errors import OutOfResourcesError
from .locks import AllocatorLock, allocator_lock, check_not_reentered

ROUND = 512
SMALL_REQUEST = 1 << 20
SMALL_SEGMENT = 2 << 20
LARGE_ROUND = 2 << 20


def rounded(size: int) -> int:
    return (size + ROUND - 1) & ~(ROUND - 1)


class Segment:
    """One backend allocation.  Immutable but for ``first``; guarded by its allocator's lock."""

    __slots__ = ("base", "size", "pooled", "first")

    def __init__(self, base: int, size: int, pooled: bool) -> None:
        self.base = base
        self.size = size
        self.pooled = pooled  # carved into blocks and cached (else: one block, freed at once)
        self.first: Block | None = None  # the block at ``base`` (splits and merges keep it first)

    def in_use(self) -> bool:
        """Whether a block of the segment is in use (lock held)."""
        block = self.first
        while block is not None:
            if not block.free:
                return True
            block = block.next
        return False


class Block:
    """A piece of a segment: in use by one allocation, or free on its size's list.  Every field
    is guarded by the lock of the allocator the segment belongs to."""

    __slots__ = ("ptr", "size", "segment", "prev", "next", "free", "queue", "seq")

    def __init__(self, ptr: int, size: int, segment: Segment) -> None:
        self.ptr = ptr
        self.size = size  # rounded
        self.segment = segment
        self.prev: Block | None = None  # the block below it in its segment
        self.next: Block | None = None  # the block above it in its segment
        self.free = False  # on its size's free list
        self.queue: Any = None  # the queue a stream-ordered free was made on, or None
        self.seq = 0  # that free's sequence number on ``queue``

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


class CachingAllocator:
    """Cached blocks of one (context, device, kind)."""

    __slots__ = (
        "_alloc",
        "backend_free",
        "max_request",
        "limit",
        "release_threshold",
        "on_exhausted",
        "_lock",
        "_lists",
        "_sizes",
        "_segments",
        "in_use",
        "reserved",
        "peak_in_use",
        "peak_reserved",
        "allocations",
        "hits",
        "backend_allocs",
        "backend_frees",
        "__weakref__",
    )

    def __init__(
        self,
        backend_alloc: Callable[[int], int],
        backend_free: Callable[[int], None],
        max_request: int | None,
        on_exhausted: Callable[[], int] | None = None,
        lock: AllocatorLock | None = None,
    ) -> None:
        self._alloc = backend_alloc
        self.backend_free = backend_free
        self.on_exhausted = on_exhausted
        # Its own lock, or the one it shares (a context's pools share the address registry's: an
        # allocation takes a block and records it in one section).
        self._lock = allocator_lock() if lock is None else lock
        # -- guarded by _lock ------------------------------------------------------------------
        self.max_request = max_request  # None: every size; 0: pool off
        self.limit: int | None = None  # most bytes reserved from the backend; None: no limit
        # Most bytes kept cached after a free (None: no bound): a free that leaves more trims.
        self.release_threshold: int | None = None
        # Free blocks by size.  A list emptied by a take stays (the next give of its size is an
        # append), until a miss that coalesces sweeps the empty ones out (see _coalesce).
        self._lists: dict[int, list[Block]] = {}
        self._sizes: list[int] = []  # the keys of _lists, sorted (for best fit)
        self._segments: dict[int, Segment] = {}  # pooled segments by base
        self.in_use = 0  # bytes of blocks in use (unpooled ones included)
        self.reserved = 0  # bytes reserved from the backend, or being reserved
        self.peak_in_use = 0
        self.peak_reserved = 0
        self.allocations = 0
        self.hits = 0
        self.backend_allocs = 0
        self.backend_frees = 0

    @property
    def lock(self) -> Any:
        """The lock that guards this allocator, its segments and its blocks."""
        return self._lock

    @property
    def enabled(self) -> bool:
        return self.max_request != 0

    # -- the hot path -------------------------------------------------------------------------

    def take(self, size: int, queue: Any = None) -> Block:
        """A block of at least ``size`` bytes, usable by work on ``queue`` (``None``: right away)."""
        lock = self._lock
        check_not_reentered(lock, "alloc")
        with lock:
            block = self.take_cached(size, queue)
        if block is not None:
            return block
        bound = self.max_request
        if bound is None or (bound != 0 and size <= bound):
            return self._grow((size + ROUND - 1) & ~(ROUND - 1))
        return self._unpooled(size)

    def take_cached(self, size: int, queue: Any = None) -> Block | None:
        """:meth:`take` from what the pool holds (lock held): ``None`` where that needs a new
        segment or the request is not the pool's to serve."""
        bound = self.max_request
        if not (bound is None or (bound != 0 and size <= bound)):
            return None
        need = (size + ROUND - 1) & ~(ROUND - 1)
        try:
            free = self._lists.get(need)
            if free:
                block = free[-1]
                if block.queue is None or block.usable_by(queue):
                    free.pop()
                    self.hits += 1
                    return self._use(block, need)
            fit = self._best_fit(need, queue)
            if fit is None and self._coalesce():
                fit = self._best_fit(need, queue)
        except BaseException:
            self._repair()
            raise
        return fit

    def give(self, block: Block, queue: Any = None, seq: int = 0) -> None:
        """Return a block; ``queue``/``seq``: freed in that queue's order (not yet complete)."""
        if not block.segment.pooled:
            self._release_unpooled(block)
            return
        with self._lock:
            self.give_locked(block, queue, seq)
        if self.release_threshold is not None:
            self.keep_within_threshold()

    def keep_within_threshold(self) -> None:
        """After a give (lock not held): trim down to ``release_threshold`` if more is cached.
        The two counters are read without the lock, as a hint: ``trim`` decides under it."""
        threshold = self.release_threshold
        if threshold is not None and self.reserved - self.in_use > threshold:
            self.trim(threshold)

    def reserve(self, size: int) -> None:
        """Cache a new segment of at least ``size`` bytes now (a pool's initial reserve; lock not
        held)."""
        self.give(self._grow((size + ROUND - 1) & ~(ROUND - 1)))

    def give_locked(self, block: Block, queue: Any, seq: int) -> None:
        """:meth:`give` of a block of a pooled segment (lock held)."""
        try:
            block.queue, block.seq = queue, seq
            self.in_use -= block.size
            self._put(block)
        except BaseException:
            self._repair()
            raise

    # -- the slow path (lock held unless said otherwise) --------------------------------------

    def _put(self, block: Block) -> None:
        block.free = True  # on its list by the end of this call, or put there by _repair
        free = self._lists.get(block.size)
        if free is None:
            self._lists[block.size] = [block]
            insort(self._sizes, block.size)
        else:
            free.append(block)

    def _repair(self) -> None:
        """Rebuild the free lists from the segments' chains of blocks, their source of truth
        (lock held): what an exception (a ``KeyboardInterrupt``) between two statements of an
        update left half-done.  A block it stopped between two lists is free and listed again; a
        block it stopped on its way out was never handed out, and is free again too."""
        lists: dict[int, list[Block]] = {}
        for segment in self._segments.values():
            block = segment.first
            while block is not None:
                if block.free:
                    lists.setdefault(block.size, []).append(block)
                block = block.next
        self._lists, self._sizes = lists, sorted(lists)

    def _unlist(self, block: Block) -> None:
        self._lists[block.size].remove(block)

    def _best_fit(self, need: int, queue: Any) -> Block | None:
        """Split the smallest usable free block larger than ``need``."""
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
        """Mark ``block`` (off its list) in use for ``need`` bytes, splitting off the rest."""
        if block.size > need:
            rest = Block(block.ptr + need, block.size - need, block.segment)
            rest.prev, rest.next, rest.queue, rest.seq = block, block.next, block.queue, block.seq
            # One statement: the chain and the sizes change together (an interrupt comes between
            # statements, never inside one).
            block.next, block.size = rest, need
            if rest.next is not None:
                rest.next.prev = rest
            self._put(rest)
        block.free = False
        block.queue = None
        self.in_use += need
        self.allocations += 1
        if self.in_use > self.peak_in_use:
            self.peak_in_use = self.in_use
        return block

    def _coalesce(self) -> int:
        """Merge free neighbours with the same stream tag, then sweep out emptied free lists;
        the number of merges."""
        merged = 0
        for size in list(self._sizes):
            for block in list(self._lists.get(size, ())):
                if not block.free:
                    continue
                nxt = block.next
                while nxt is not None and nxt.free and nxt.queue is block.queue:
                    self._unlist(block)
                    self._unlist(nxt)
                    # One statement (see _use): nxt is merged away, no longer a block of its own.
                    block.size, block.seq, block.next, nxt.free = (
                        block.size + nxt.size,
                        max(block.seq, nxt.seq),
                        nxt.next,
                        False,
                    )
                    if nxt.next is not None:
                        nxt.next.prev = block
                    self._put(block)
                    merged += 1
                    nxt = block.next
        kept = {size: free for size, free in self._lists.items() if free}
        if len(kept) != len(self._lists):  # sweep the emptied lists out (one statement, see _use)
            self._lists, self._sizes = kept, sorted(kept)
        return merged

    def _reserve(self, size: int) -> None:
        """Count ``size`` more bytes as reserved, within the limit (lock not held: it trims
        first where the limit would be passed)."""
        for attempt in range(2):
            with self._lock:
                limit = self.limit
                if limit is None or self.reserved + size <= limit:
                    self.reserved += size
                    if self.reserved > self.peak_reserved:
                        self.peak_reserved = self.reserved
                    return
                if attempt:
                    raise OutOfResourcesError(
                        f"memory pool limit of {limit} bytes reached ({self.reserved} reserved, {size} more needed)"
                    )
            self.trim()

    def _grow(self, need: int) -> Block:
        """A new segment from the backend for ``need`` bytes (lock not held)."""
        seg_size = SMALL_SEGMENT if need <= SMALL_REQUEST else -(-need // LARGE_ROUND) * LARGE_ROUND
        self._reserve(seg_size)
        try:
            base = self._backend_alloc(seg_size)
        except BaseException:
            with self._lock:
                self.reserved -= seg_size
            raise
        segment = Segment(base, seg_size, True)
        block = Block(base, seg_size, segment)
        segment.first = block
        with self._lock:
            try:
                self._segments[base] = segment
                return self._use(block, need)
            except BaseException:
                self._repair()
                raise

    def _backend_alloc(self, size: int) -> int:
        """One backend allocation (lock not held)."""
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
        with self._lock:
            self.backend_allocs += 1
        return ptr

    def _unpooled(self, size: int) -> Block:
        """A segment of its own, released when freed (lock not held)."""
        self._reserve(size)
        try:
            base = self._backend_alloc(size)
        except BaseException:
            with self._lock:
                self.reserved -= size
            raise
        segment = Segment(base, size, False)
        block = Block(base, size, segment)
        segment.first = block
        with self._lock:
            self.in_use += size
            self.allocations += 1
            if self.in_use > self.peak_in_use:
                self.peak_in_use = self.in_use
        return block

    def _release_unpooled(self, block: Block) -> None:
        self.backend_free(block.ptr)
        with self._lock:
            block.free = True
            self.backend_frees += 1
            self.reserved -= block.size
            self.in_use -= block.size

    # -- the public side ----------------------------------------------------------------------

    def trim(self, keep: int = 0) -> int:
        """Give cached segments that are wholly free (and complete) back to the backend until at
        most ``keep`` bytes stay cached; return the bytes released."""
        victims: list[Segment] = []
        with self._lock:
            try:
                self._coalesce()
                cached = self.reserved - self.in_use
                for segment in list(self._segments.values()):
                    if cached <= keep:
                        break
                    block = self._whole_free(segment)
                    if block is not None:
                        self._unlist(block)
                        victims.append(self._segments.pop(segment.base))
                        cached -= segment.size
            except BaseException:
                self._repair()
                raise
        released = freed = 0
        try:
            for segment in victims:
                self.backend_free(segment.base)
                released += segment.size
                freed += 1
        finally:  # a backend failure (or an interrupt) leaves the rest leaked, counted as reserved
            with self._lock:
                self.reserved -= released
                self.backend_frees += freed
        return released

    def _whole_free(self, segment: Segment) -> Block | None:
        for block in self._lists.get(segment.size, ()):
            if block.segment is segment and block.ptr == segment.base and block.usable_by(None):
                return block
        return None

    def release_all(self) -> tuple[list[int], list[Segment]]:
        """Forget every segment (teardown): the bases of those wholly free, for the backend to
        free, and the segments still holding a block in use (an allocation that teardown leaked
        because it is exported or in flight: they are never given back, never unmapped)."""
        with self._lock:
            bases: list[int] = []
            kept: list[Segment] = []
            for segment in self._segments.values():
                if segment.in_use():
                    kept.append(segment)
                else:
                    bases.append(segment.base)
                    self.reserved -= segment.size
            self._segments.clear()
            self._lists.clear()
            self._sizes.clear()
        return bases, kept

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                in_use_bytes=self.in_use,
                cached_bytes=self.reserved - self.in_use,
                reserved_bytes=self.reserved,
                peak_in_use_bytes=self.peak_in_use,
                peak_reserved_bytes=self.peak_reserved,
                segments=len(self._segments),
                allocations=self.allocations,
                cache_hits=self.hits,
                backend_allocs=self.backend_allocs,
                backend_frees=self.backend_frees,
            )
