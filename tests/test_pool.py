"""The caching allocator on its own (a counting fake backend) and through the host device:
rounding, splitting, coalescing, stream-ordered reuse, limits, trim, out-of-memory retry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, OffloadError, OutOfResourcesError
from pyoffload.pool import LARGE_ROUND, SMALL_SEGMENT, CachingAllocator


class Backend:
    """Hands out disjoint fake addresses and counts calls; can be told to run out of memory."""

    def __init__(self, capacity: int = 1 << 40) -> None:
        self.next = 1 << 32
        self.live: dict[int, int] = {}
        self.capacity = capacity
        self.allocs = 0
        self.frees = 0

    def alloc(self, size: int) -> int:
        if sum(self.live.values()) + size > self.capacity:
            raise OutOfResourcesError("fake device memory exhausted")
        ptr = self.next
        self.next += size + (1 << 20)
        self.live[ptr] = size
        self.allocs += 1
        return ptr

    def free(self, ptr: int) -> None:
        del self.live[ptr]
        self.frees += 1


class Q:
    """Just what the allocator reads of a queue: how far it has completed."""

    def __init__(self) -> None:
        self.done = 0


def make(max_request: int | None = None, capacity: int = 1 << 40) -> tuple[CachingAllocator, Backend]:
    b = Backend(capacity)
    return CachingAllocator(b.alloc, b.free, max_request), b


def test_small_requests_share_a_segment_and_are_reused():
    pool, b = make()
    blocks = [pool.take(100) for _ in range(8)]
    assert b.allocs == 1 and all(blk.size == 512 for blk in blocks)
    assert len({blk.ptr for blk in blocks}) == 8
    ptr = blocks[3].ptr
    pool.give(blocks[3])
    again = pool.take(500)
    assert again.ptr == ptr, "a freed block of the same size class was not reused"
    assert pool.stats().cache_hits >= 1


def test_large_requests_get_rounded_segments_of_their_own():
    pool, b = make()
    blk = pool.take(3 << 20)
    assert b.allocs == 1 and b.live[blk.ptr] == 2 * LARGE_ROUND
    pool.give(blk)
    assert pool.take(3 << 20).ptr == blk.ptr and b.allocs == 1


def test_a_large_free_block_is_split_for_a_smaller_request():
    pool, b = make()
    big = pool.take(8 << 20)
    pool.give(big)
    part = pool.take(4 << 20)
    assert part.ptr == big.ptr and b.allocs == 1, "the cached segment was not split"
    rest = pool.take(4 << 20)
    assert rest.ptr == big.ptr + (4 << 20) and b.allocs == 1


def test_free_neighbours_coalesce_before_a_new_segment_is_asked_for():
    pool, b = make()
    parts = [pool.take(1 << 20) for _ in range(2)]  # one 2 MiB segment, split in two
    assert b.allocs == 1
    for p in parts:
        pool.give(p)
    whole = pool.take(SMALL_SEGMENT)
    assert whole.ptr == parts[0].ptr and b.allocs == 1, "the halves were not merged back"


def test_emptied_size_lists_still_serve_best_fit_and_trim():
    """A size's free list emptied by a take stays until a miss sweeps it: neither the sweep nor
    the empty lists may hide a free block from best fit, coalescing or trim."""
    pool, b = make()
    sizes = [512 * k for k in range(1, 9)]
    blocks = [pool.take(s) for s in sizes]  # one segment, carved into eight sizes
    for blk in blocks:
        pool.give(blk)
    again = [pool.take(s) for s in sizes]  # every list emptied again
    assert [blk.ptr for blk in again] == [blk.ptr for blk in blocks]
    assert b.allocs == 1 and pool.stats().cache_hits == len(sizes)
    for blk in again:
        pool.give(blk)
    odd = pool.take(3 * 512 + 1)  # a size no list holds: best fit splits a larger free block
    assert b.allocs == 1
    pool.give(odd)
    whole = pool.take(SMALL_SEGMENT)  # needs every neighbour merged back: a miss that sweeps
    assert b.allocs == 1 and whole.ptr == blocks[0].ptr
    pool.give(whole)
    assert pool.trim() == SMALL_SEGMENT and b.live == {}


def test_trim_returns_whole_free_segments_only():
    pool, b = make()
    a, c = pool.take(100), pool.take(4 << 20)
    pool.give(c)
    released = pool.trim()
    assert released == 4 << 20 and b.frees == 1
    assert pool.stats().in_use_bytes == 512
    pool.give(a)
    assert pool.trim() == SMALL_SEGMENT and not b.live


def test_limit_trims_then_refuses():
    pool, b = make()
    pool.limit = 6 << 20
    first = pool.take(4 << 20)
    pool.give(first)
    second = pool.take(5 << 20)  # 4 MiB cached + 6 MiB would pass the limit: trim, then fit
    assert b.frees == 1 and pool.stats().reserved_bytes == 6 << 20
    with pytest.raises(OffloadError) as err:
        pool.take(4 << 20)
    assert err.value.errc is Errc.OUT_OF_RESOURCES and "limit" in str(err.value)
    pool.give(second)


def test_out_of_memory_releases_the_cache_and_retries_once():
    pool, b = make(capacity=8 << 20)
    cached = pool.take(6 << 20)
    pool.give(cached)
    blk = pool.take(7 << 20)  # fails once (6 MiB cached), trims, retries
    assert b.frees == 1 and blk.size >= 7 << 20
    with pytest.raises(OutOfResourcesError):
        pool.take(4 << 20)


def test_stream_ordered_reuse():
    pool, b = make()
    q1, q2 = Q(), Q()
    blk = pool.take(256)
    pool.give(blk, q1, seq=5)  # freed in q1's order, q1 has not got there yet
    assert pool.take(256, q1).ptr == blk.ptr, "q1's own later work may reuse it at once"
    pool.give(blk, q1, seq=5)
    other = pool.take(256, q2)
    assert other.ptr != blk.ptr, "another queue reused memory q1 may still use"
    plain = pool.take(256)
    assert plain.ptr != blk.ptr, "an unordered allocation reused memory q1 may still use"
    q1.done = 5
    assert pool.take(256, q2).ptr == blk.ptr, "q1 passed the free: anyone may reuse it"


def test_pool_off_and_bounded_requests_go_straight_to_the_backend():
    pool, b = make(max_request=1 << 20)
    big = pool.take(2 << 20)
    assert not big.segment.pooled and b.live[big.ptr] == 2 << 20
    pool.give(big)
    assert b.frees == 1 and not b.live, "memory above the bound is not cached"
    pool.max_request = 0
    small = pool.take(64)
    pool.give(small)
    assert b.frees == 2


def test_concurrent_take_and_give_hand_out_disjoint_blocks():
    pool, _ = make()
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        mine = []
        for _ in range(500):
            if mine and rng.random() < 0.5:
                pool.give(mine.pop(int(rng.integers(len(mine)))))
            else:
                blk = pool.take(int(rng.choice([64, 700, 5000, 1 << 20, 3 << 20])))
                mine.append(blk)
                with lock:
                    seen.append((blk.ptr, blk.size))
        live = [(b.ptr, b.ptr + b.size) for b in mine]
        with lock:
            seen.append(("live", live))  # type: ignore[arg-type]
        for blk in mine:
            pool.give(blk)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.stats().in_use_bytes == 0


# -- through the host device -----------------------------------------------------------------


def test_device_pool_statistics_and_trim(host):
    ctx = pyoffload.Context([host])
    pool = ctx.memory_pool(host)
    allocs = [ctx.alloc(1000) for _ in range(10)]
    s = pool.stats()
    assert s.in_use_bytes == 10 * 1024 and s.segments == 1 and s.backend_allocs == 1
    for a in allocs:
        a.free()
    assert pool.stats().in_use_bytes == 0 and pool.trim() == SMALL_SEGMENT
    ctx.close()


def test_pool_controls_at_run_time(host):
    ctx = pyoffload.Context([host])
    pool = ctx.memory_pool(host)
    pool.enabled = False
    a = ctx.alloc(64)
    a.free()
    assert pool.stats().cached_bytes == 0
    pool.enabled = True
    pool.max_request = 1 << 10
    b = ctx.alloc(4096)  # above the bound: its own allocation, freed at once
    b.free()
    assert pool.stats().cached_bytes == 0
    ctx.close()


def test_free_async_reuses_on_the_same_queue_without_waiting(host):
    ctx = pyoffload.Context([host])
    q = ctx.create_queue(host)
    gate = threading.Event()
    q.launch_host_function(gate.wait)  # the queue is held back
    a = q.alloc_async(4096)
    q.memfill(a, np.uint8(1))
    ptr = a.ptr
    q.free_async(a)  # returns at once
    b = q.alloc_async(4096)
    assert b.ptr == ptr, "the same queue did not reuse its own stream-ordered free"
    c = ctx.alloc(4096)
    assert c.ptr != ptr, "unordered allocation got memory a held-back queue still uses"
    gate.set()
    q.wait()
    for x in (b, c):
        x.free()
    q.destroy()
    ctx.close()


def test_free_async_of_memory_another_queue_uses_orders_on_that_queue(host):
    ctx = pyoffload.Context([host])
    q1, q2 = ctx.create_queue(host), ctx.create_queue(host)
    gate = threading.Event()
    a = ctx.alloc(4096)
    q1.launch_host_function(gate.wait)
    q1.memfill(a, np.uint8(9))
    ev = q2.free_async(a)  # must not block the host
    assert not ev.is_complete, "the free did not wait for q1's fill"
    gate.set()
    ev.wait()
    assert a.freed
    q1.destroy()
    q2.destroy()
    ctx.close()


def test_host_pool_serves_host_memory(host):
    ctx = pyoffload.Context([host])
    pool = ctx.memory_pool(kind=AllocKind.HOST)
    a = ctx.alloc(100, AllocKind.HOST)
    assert pool.stats().in_use_bytes == 512
    a.free()
    ctx.close()


@pytest.mark.parametrize("destroyed", [False, True])
def test_context_close_keeps_a_created_pools_exported_memory(destroyed):
    """A created pool's block that is still exported when its context closes is leaked with its
    segment (a TeardownWarning), never handed back to the backend under its consumer: read in a
    child process, where a use after unmap would be a crash, not a failed assert."""
    script = textwrap.dedent(
        f"""
        import warnings
        import numpy as np
        import pyoffload
        from pyoffload import TeardownWarning

        dev = pyoffload.host_device()
        ctx = pyoffload.Context([dev])
        pool = ctx.create_pool(dev, release_threshold=0)
        a = pool.alloc(8 << 20)  # a segment of its own
        view = a.view(np.uint8)
        view[:] = 7
        if {destroyed!r}:
            pool.destroy()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ctx.close()
        assert any(issubclass(w.category, TeardownWarning) and "still exported" in str(w.message) for w in caught)
        assert int(view.sum()) == 7 * (8 << 20)
        print("read after close")
        """
    )
    env = {**os.environ, "PYOFFLOAD_PLUGINS": ""}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "read after close" in proc.stdout, proc.stderr
