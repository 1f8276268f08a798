"""Generic memory machinery on the host device: caching allocator, OOM retry, tracking, range map."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, OffloadError, OutOfResourcesError, runtime
from pyoffload.addresses import intervals
from pyoffload.addresses.intervals import RangeMap

from faults import FaultPlugin, install


def test_pool_is_emptied_and_the_allocation_retried_on_oom(fresh_runtime):
    # a fresh runtime: memory other tests still hold would keep a cached segment in use
    host = pyoffload.host_device()
    pool = host.memory_pool()
    small = [host.alloc(64) for _ in range(4)]
    for a in small:
        a.free()
    assert pool.stats().cached_bytes > 0
    plugin = FaultPlugin("data_alloc_impl", nth=1, exc=OutOfResourcesError("device memory exhausted"))
    factory = install(plugin)
    try:
        big = host.alloc(8 << 20)
    finally:
        runtime.remove_wrapper(factory)
    assert plugin.fired == 1 and plugin.calls == 2, "no retry after the pool was emptied"
    assert pool.stats().segments == 1, "the cached segments were not released before the retry"
    big.free()
    assert pool.stats().in_use_bytes == 0


def test_oom_with_empty_pool_is_reported(host):
    host.memory_pool().trim()
    plugin = FaultPlugin("data_alloc_impl", nth=1, exc=OutOfResourcesError("device memory exhausted"))
    factory = install(plugin)
    try:
        before = len(host.rt.registry)
        with pytest.raises(OffloadError) as err:
            host.alloc(8 << 20)
        assert err.value.errc is Errc.OUT_OF_RESOURCES
        assert len(host.rt.registry) == before
    finally:
        runtime.remove_wrapper(factory)


def test_free_of_the_wrong_kind(host):
    a = host.alloc(1 << 16)
    with pytest.raises(OffloadError) as err:
        pyoffload.free(a.ptr, kind=AllocKind.HOST)
    assert err.value.errc is Errc.INVALID_ARGUMENT and "DEVICE memory, not HOST" in str(err.value)
    assert not a.freed
    pyoffload.free(a.ptr, kind=AllocKind.DEVICE)


def test_tracker_reports_leaks_and_origins():
    code = textwrap.dedent("""
        import pyoffload
        dev = pyoffload.host_device()
        kept = dev.alloc(1000)          # leaked on purpose
        gone = dev.alloc(2000)
        gone.free()
        try:
            gone.free()
        except pyoffload.OffloadError as e:
            print("DOUBLE", e)
    """)
    env = dict(os.environ, PYOFFLOAD_TRACK_ALLOCATIONS="1", PYOFFLOAD_PLUGINS="")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "DOUBLE" in proc.stdout and "allocated at <string>:5" in proc.stdout and "freed at <string>:6" in proc.stdout
    assert "host-0: 2 allocations, 3000 bytes, peak 3000 bytes, min 1000 max 2000, 1 live (1000 bytes)" in proc.stderr
    assert "leaked: 1 allocations" in proc.stderr and "<string>:4" in proc.stderr


def test_range_map_lookup_and_overlap():
    m: RangeMap[str] = RangeMap()
    assert m.insert(100, 200, "a") == [] and m.insert(300, 310, "b") == []
    assert m.find(100)[2] == "a" and m.find(199)[2] == "a" and m.find(200) is None
    assert m.find(99) is None and m.find(305)[2] == "b"
    assert [v for _, _, v in m.overlapping(150, 301)] == ["a", "b"]
    assert m.overlapping(200, 300) == []
    assert [v for _, _, v in m.insert(150, 350, "c")] == ["a", "b"], "an overlapping range was inserted"
    m.remove(100)
    assert m.find(150) is None and len(m) == 1


def test_host_copy_of_numpy_views(host):
    a = host.alloc(4 * 100)
    src = np.arange(200, dtype=np.int32)[::2]  # not contiguous
    with pytest.raises(OffloadError) as err:
        pyoffload.memcpy(a, src)
    assert err.value.errc is Errc.INVALID_ARGUMENT and "contiguous" in str(err.value)
    a.free()


class _RemapLocks:
    """A wrapper that makes the host backend hand out device addresses unlike the host ones,
    as drivers that map pinned memory elsewhere do."""

    OFFSET = 1 << 44

    @staticmethod
    def factory(backend):
        from collections.abc import Generator

        from pyoffload.backend import hookimpl

        class Remap:
            @hookimpl(wrapper=True)
            def data_lock_impl(self, device, ptr, size) -> Generator:
                return (yield) + _RemapLocks.OFFSET

        return Remap()


def test_memcpy_accepts_the_device_address_of_a_locked_range(host):
    runtime.add_wrapper(_RemapLocks.factory)
    try:
        buf = np.arange(64, dtype=np.int32)
        dev_ptr = host.lock(buf)
        assert dev_ptr == buf.ctypes.data + _RemapLocks.OFFSET
        out = np.zeros(32, dtype=np.int32)
        pyoffload.memcpy(out, dev_ptr + 128, 128)
        assert np.array_equal(out, np.arange(32, 64, dtype=np.int32))
        with pytest.raises(OffloadError) as err:
            pyoffload.memcpy(out, dev_ptr + 200, 128)
        assert err.value.errc is Errc.INVALID_SIZE
        host.unlock(buf)
    finally:
        runtime.remove_wrapper(_RemapLocks.factory)


def test_range_map_against_a_brute_force_model(monkeypatch):
    import random

    monkeypatch.setattr(intervals, "LOAD", 8)  # many sub-lists: splits and empties happen
    m: RangeMap[int] = RangeMap()
    ref: dict[int, int] = {}  # base -> end
    rng = random.Random(0)
    for step in range(5000):
        if ref and rng.random() < 0.45:
            base = rng.choice(list(ref))
            del ref[base]
            assert m.remove(base) == base
        else:
            base = rng.randrange(10**6)
            end = base + rng.randrange(1, 50)
            clash = any(b < end and base < e for b, e in ref.items())
            assert bool(m.insert(base, end, base)) == clash
            if not clash:
                ref[base] = end
        if step % 7 == 0:
            q = rng.randrange(10**6)
            hit = [b for b, e in ref.items() if b <= q < e]
            found = m.find(q)
            assert (found[0] if found else None) == (hit[0] if hit else None)
    assert len(m) == len(ref)
    assert [b for b, _, _ in m.items()] == sorted(ref)
