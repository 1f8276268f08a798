"""Memory pools as objects: create_pool with properties, alloc from a pool, statistics, trim,
release threshold, destroy, and the errors of each (UR's urUSMPoolCreate family)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, OffloadError

from ._util import errc_of, read

MiB = 1 << 20


def _pool_or_skip(device, kind=AllocKind.DEVICE, **props):
    try:
        return device.create_pool(kind, **props)
    except pyoffload.UnsupportedError as exc:
        pytest.skip(f"{device.id} does not support {kind.name}: {exc}")


def test_a_created_pool_serves_its_own_allocations(device):
    pool = _pool_or_skip(device)
    default = device.memory_pool()
    before = default.stats().in_use_bytes
    a = pool.alloc(1000)
    b = device.alloc(3000, pool=pool)
    try:
        assert pool.created and not default.created
        assert pool.stats().in_use_bytes == 1024 + 3072
        assert default.stats().in_use_bytes == before, "the pool behind alloc served a created pool's request"
        assert pyoffload.mem_info(a.ptr).allocation is a and a.device is device
        data = np.arange(250, dtype=np.int32)
        pyoffload.memcpy(a, data)
        assert np.array_equal(read(a, np.int32, 250), data)
    finally:
        a.free()
        b.free()
    s = pool.stats()
    assert s.in_use_bytes == 0 and s.cached_bytes > 0 and s.allocations == 2
    again = pool.alloc(1000)  # from the pool's own cache
    assert pool.stats().cache_hits >= 1 and pool.stats().backend_allocs == s.backend_allocs
    again.free()
    assert pool.trim() > 0 and pool.stats().reserved_bytes == 0
    pool.destroy()


def test_pool_properties(device):
    pool = _pool_or_skip(device, limit=4 * MiB, initial_reserve=MiB, max_request=64 * 1024)
    try:
        s = pool.stats()
        assert s.reserved_bytes >= MiB and s.cached_bytes == s.reserved_bytes and s.in_use_bytes == 0
        assert pool.limit == 4 * MiB and pool.max_request == 64 * 1024
        a = pool.alloc(4096)  # from the initial reserve: no new backend allocation
        assert pool.stats().backend_allocs == s.backend_allocs
        a.free()
        with pytest.raises(pyoffload.OutOfResourcesError):
            pool.alloc(8 * MiB)  # past the limit (an unpooled request counts against it too)
    finally:
        pool.destroy()


def test_release_threshold_trims_at_free(device):
    pool = _pool_or_skip(device, release_threshold=0)
    a = pool.alloc(4096)
    assert pool.stats().reserved_bytes > 0
    a.free()
    s = pool.stats()
    assert s.reserved_bytes == 0 and s.backend_frees >= 1, "a free left more than the threshold cached"
    pool.release_threshold = None
    b = pool.alloc(4096)
    b.free()
    assert pool.stats().cached_bytes > 0
    pool.release_threshold = 0  # setting it trims at once
    assert pool.stats().reserved_bytes == 0
    pool.destroy()


def test_stream_ordered_allocation_from_a_pool(device, queue):
    pool = _pool_or_skip(device)
    a = queue.alloc_async(2048, pool=pool)
    assert pool.stats().in_use_bytes == 2048
    pyoffload.memfill(a, np.uint8(7))
    queue.free_async(a)
    queue.wait()
    assert pool.stats().in_use_bytes == 0
    pool.destroy()


def test_destroy_keeps_blocks_in_use_until_freed(device):
    pool = _pool_or_skip(device)
    a = pool.alloc(4096)
    cached = pool.alloc(3 * MiB)  # larger than a's segment: a segment of its own, cached once freed
    cached.free()
    pool.destroy()
    pool.destroy()  # harmless
    assert "destroyed" in repr(pool)
    assert errc_of(pool.alloc, 64) is Errc.INVALID_ARGUMENT
    assert errc_of(device.alloc, 64, pool=pool) is Errc.INVALID_ARGUMENT
    s = pool.stats()
    assert s.in_use_bytes == 4096 and s.cached_bytes < 2 * MiB, "destroy kept the cache"
    pyoffload.memfill(a, np.uint8(3))  # still valid memory
    assert np.all(read(a, np.uint8, 4096) == 3)
    a.free()
    assert pool.stats().reserved_bytes == 0, "a block freed after destroy stayed with the pool"


def test_the_pool_behind_alloc_cannot_be_destroyed(device):
    assert errc_of(device.memory_pool().destroy) is Errc.INVALID_ARGUMENT
    a = device.alloc(64)  # still serves
    a.free()


def test_pool_errors(device):
    assert errc_of(device.create_pool, limit=-1) is Errc.INVALID_SIZE
    assert errc_of(device.create_pool, release_threshold=-5) is Errc.INVALID_SIZE
    with pytest.raises(TypeError):
        device.create_pool(limit=1.5)
    with pytest.raises(TypeError):
        device.alloc(64, pool="a pool")
    pool = _pool_or_skip(device)
    try:
        # a pool serves exactly its kind and device
        assert errc_of(device.alloc, 64, AllocKind.MANAGED, pool=pool) is Errc.INVALID_ARGUMENT
        assert errc_of(pool.alloc, 0) is Errc.INVALID_SIZE
        ctx = pyoffload.Context([device])
        try:
            assert errc_of(ctx.alloc, 64, pool=pool) is Errc.INVALID_ARGUMENT
        finally:
            ctx.close()
    finally:
        pool.destroy()
    assert pool.stats().reserved_bytes == 0, "a failed request left memory in the pool"


def test_host_memory_pool(device):
    pool = _pool_or_skip(device, AllocKind.HOST)
    a = pool.alloc(256)
    assert a.kind is AllocKind.HOST and a.device is None
    a.view(np.uint8)[:] = 5
    assert a.view(np.uint8).sum() == 5 * 256
    a.free()
    pool.destroy()


def test_context_close_releases_its_pools(device):
    ctx = pyoffload.Context([device])
    pool = ctx.create_pool(device)
    a = pool.alloc(4096)
    kept = pool.alloc(100)
    kept.free()
    ctx.close()
    assert not a.live, "closing the context did not free the pool's allocation"
    assert pool.stats().reserved_bytes == 0
    with pytest.raises(OffloadError) as err:
        pool.alloc(64)
    assert err.value.errc in (Errc.INVALID_CONTEXT, Errc.INVALID_ARGUMENT)


def test_threads_share_a_pool(device):
    pool = _pool_or_skip(device, limit=64 * MiB)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                a = pool.alloc(int(rng.integers(1, 20000)))
                a.free()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    s = pool.stats()
    assert s.in_use_bytes == 0 and s.allocations == 800
    pool.destroy()
