"""The memory model: contexts and ownership, memory connections, pinning, managed memory,
stream-ordered allocation and the small-allocation pool."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Context, Errc, MemAdvice, MemoryConnection, OffloadError

from ._util import launch_n, read


def _lock_or_skip(device, buf):
    try:
        return device.lock(buf)
    except pyoffload.UnsupportedError as exc:
        pytest.skip(f"{device.id} cannot lock host memory: {exc}")


# -- contexts --------------------------------------------------------------------------------


def test_context_owns_its_allocations(device):
    ctx = Context([device])
    dev_mem = ctx.alloc(256)
    try:
        host_mem = ctx.alloc(256, AllocKind.HOST)
    except pyoffload.UnsupportedError:
        host_mem = None
    assert dev_mem.context is ctx and dev_mem.device is device
    if host_mem is not None:
        assert host_mem.device is None and pyoffload.mem_info(host_mem.ptr + 3).device is None
        assert pyoffload.mem_info(host_mem.ptr).context is ctx
    ctx.close()
    assert dev_mem.freed and (host_mem is None or host_mem.freed)
    with pytest.raises(OffloadError):
        ctx.alloc(16)


def test_context_rejects_devices_of_two_platforms(device):
    others = [d for d in pyoffload.devices() if d.platform is not device.platform and not d.host_memory]
    if device.host_memory or not others:
        pytest.skip("needs two non-host platforms")
    with pytest.raises(OffloadError) as err:
        Context([device, others[0]])
    assert err.value.errc is Errc.INVALID_ARGUMENT
    assert device.id in str(err.value) and others[0].id in str(err.value)


def test_device_not_in_context_rejected(device_pair):
    a, b = device_pair
    ctx = Context([a])
    with pytest.raises(OffloadError) as err:
        ctx.alloc(64, AllocKind.DEVICE, device=b)
    assert err.value.errc is Errc.INVALID_ARGUMENT and b.id in str(err.value)
    ctx.close()


def test_free_needs_only_the_pointer_across_contexts(device):
    ctx1, ctx2 = Context([device]), Context([device])
    a, b = ctx1.alloc(128), ctx2.alloc(128)
    pyoffload.free(b.ptr)
    pyoffload.free(a.ptr)
    assert a.freed and b.freed
    ctx1.close()
    ctx2.close()


# -- memory connection ----------------------------------------------------------------------


def test_memory_connection_same_device_is_unified(device):
    ctx = device.default_context
    assert pyoffload.memory_connection((ctx, device), (ctx, device)) is MemoryConnection.UNIFIED
    assert pyoffload.memory_connection((ctx, device), (ctx, None)) is MemoryConnection.UNIFIED


def test_memory_connection_two_contexts(device, images):
    """Whatever a backend answers for two contexts on one device, copies back it up both ways,
    and UNIFIED is backed by a kernel of one context writing the other's memory."""
    ctx1, ctx2 = Context([device]), Context([device])
    conn = pyoffload.memory_connection((ctx1, device), (ctx2, device))
    assert conn is pyoffload.memory_connection((ctx2, device), (ctx1, device))
    if device.host_memory:
        assert conn is MemoryConnection.UNIFIED
    a, b = ctx1.alloc(4096), ctx2.alloc(4096)
    data = np.arange(1024, dtype=np.int32)
    pyoffload.memcpy(a, data)
    pyoffload.memcpy(b, a)
    assert np.array_equal(read(b, np.int32, 1024), data)
    pyoffload.memcpy(a, data[::-1].copy())
    pyoffload.memcpy(b, a)
    assert np.array_equal(read(b, np.int32, 1024), data[::-1])
    if conn is MemoryConnection.UNIFIED:
        with device.load_program(images["kernels"], context=ctx2) as prog:
            q = device.create_queue(context=ctx2)
            launch_n(q, prog.kernel("iota_i32"), 1024, [a, np.int32(1024), np.int32(5)])
            q.destroy()
        assert np.array_equal(read(a, np.int32, 1024), np.arange(5, 1029, dtype=np.int32))
    ctx1.close()
    ctx2.close()


def test_memory_connection_two_devices_one_context(device_pair):
    a, b = device_pair
    ctx = a.default_context
    conn = pyoffload.memory_connection((ctx, a), (ctx, b))
    assert conn in (MemoryConnection.MIGRATABLE, MemoryConnection.UNIFIED)
    src, dst = ctx.alloc(1 << 16, device=a), ctx.alloc(1 << 16, device=b)
    data = np.random.default_rng(0).integers(0, 255, 1 << 16, dtype=np.uint8)
    pyoffload.memcpy(src, data)
    pyoffload.memcpy(dst, src)
    assert np.array_equal(read(dst, np.uint8, 1 << 16), data)
    src.free()
    dst.free()


def test_memory_connection_with_host_backend(cross_pair):
    dev, host = cross_pair
    conn = pyoffload.memory_connection((dev.default_context, dev), (host.default_context, host))
    assert conn is MemoryConnection.NONE
    conn = pyoffload.memory_connection((dev.default_context, None), (host.default_context, host))
    assert conn is MemoryConnection.UNIFIED


# -- pinning ----------------------------------------------------------------------------------


def test_lock_nested_and_refcounted(device):
    buf = np.zeros(4096, dtype=np.uint8)
    p = _lock_or_skip(device, buf)
    assert pyoffload.is_pinned(buf.ctypes.data + 100)
    inner = buf[1024:2048]
    q = device.lock(inner)
    assert q == p + 1024
    device.unlock(buf)
    assert pyoffload.is_pinned(buf.ctypes.data), "unlocked while a user remained"
    device.unlock(inner)
    assert not pyoffload.is_pinned(buf.ctypes.data)


def test_lock_that_extends_a_locked_range_is_an_error(device):
    buf = np.zeros(8192, dtype=np.uint8)
    _lock_or_skip(device, buf[:4096])
    with pytest.raises(OffloadError) as err:
        device.lock(buf[2048:6144])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "extend" in str(err.value)
    device.unlock(buf[:4096])
    with pytest.raises(OffloadError) as err:
        device.unlock(buf[:4096])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "not locked" in str(err.value)


def test_locked_buffer_is_kept_alive(device):
    buf = np.zeros(1024, dtype=np.uint8)
    ref = weakref.ref(buf)
    _lock_or_skip(device, buf)
    addr = buf.ctypes.data
    del buf
    gc.collect()
    assert ref() is not None, "a locked buffer was collected"
    device.unlock(ref())
    assert not pyoffload.is_pinned(addr)


def test_host_allocation_is_externally_pinned(device):
    try:
        h = device.default_context.alloc(4096, AllocKind.HOST)
    except pyoffload.UnsupportedError:
        pytest.skip("no HOST memory on this device")
    view = h.view()
    assert pyoffload.is_pinned(h.ptr + 10)
    p = device.lock(view[:1024])
    assert p == h.ptr
    device.unlock(view[:1024])
    assert pyoffload.is_pinned(h.ptr), "pyoffload unlocked memory it did not lock"
    del view
    h.free()


def test_locked_memory_is_usable_by_kernels_and_copies(device, images, queue):
    buf = np.zeros(64, dtype=np.int32)
    p = _lock_or_skip(device, buf)
    with device.load_program(images["kernels"]) as prog:
        launch_n(queue, prog.kernel("iota_i32"), 64, [p, np.int32(64), np.int32(5)])
    assert np.array_equal(buf, np.arange(5, 69, dtype=np.int32))
    out = np.zeros(64, dtype=np.int32)
    pyoffload.memcpy(out, p, 256)
    assert np.array_equal(out, buf)
    device.unlock(buf)


# -- managed memory and asynchronous allocation ------------------------------------------------


def test_managed_prefetch_and_advise(device, queue):
    try:
        m = device.alloc(1 << 16, AllocKind.MANAGED)
    except pyoffload.UnsupportedError:
        pytest.skip("no MANAGED memory on this device")
    m.view(np.int32)[:] = 7
    pyoffload.advise(m, 1 << 16, MemAdvice.SET_READ_MOSTLY)
    pyoffload.prefetch(m, 1 << 16, device, queue).wait()
    pyoffload.prefetch(m, 1 << 16, None, queue).wait()
    assert (read(m, np.int32, 1 << 14) == 7).all()
    m.free()


def test_prefetch_of_non_managed_memory_is_ignored(device, queue):
    a = device.alloc(256)
    ev = pyoffload.prefetch(a, 256, device, queue)
    ev.wait()
    pyoffload.advise(a, 256, MemAdvice.SET_READ_MOSTLY)
    with pytest.raises(OffloadError) as err:
        pyoffload.prefetch(a, 512, device, queue)
    assert err.value.errc is Errc.INVALID_SIZE
    a.free()


def test_alloc_async_orders_with_the_queue(device, images, queue):
    with device.load_program(images["kernels"]) as prog:
        a = queue.alloc_async(4 * 256)
        launch_n(queue, prog.kernel("iota_i32"), 256, [a, np.int32(256), np.int32(0)])
        out = np.zeros(256, dtype=np.int32)
        queue.memcpy(out, a).wait()
        assert np.array_equal(out, np.arange(256, dtype=np.int32))
        assert pyoffload.mem_info(a.ptr).size == 1024
        queue.free_async(a).wait()
        assert a.freed
        with pytest.raises(OffloadError) as err:
            pyoffload.mem_info(a.ptr)
        assert err.value.errc is Errc.NOT_FOUND


# -- pool ---------------------------------------------------------------------------------------


def test_pool_reuses_blocks(device):
    ctx = Context([device])
    pool = ctx.memory_pool(device)
    if not pool.enabled:
        pytest.skip("pool disabled by PYOFFLOAD_POOL_THRESHOLD=0")
    a = ctx.alloc(100)
    ptr = a.ptr
    a.free()
    hits = pool.stats().cache_hits
    b = ctx.alloc(120)  # the same 512-byte block
    assert b.ptr == ptr
    assert pool.stats().cache_hits == hits + 1
    assert pyoffload.mem_info(b.ptr).size == 120
    with pytest.raises(OffloadError) as err:
        pyoffload.memcpy(b, np.zeros(128, np.uint8), 128)
    assert err.value.errc is Errc.INVALID_SIZE, "bounds are the request's, not the block's"
    b.free()
    stats = pool.stats()
    assert stats.in_use_bytes == 0 and stats.cached_bytes == stats.reserved_bytes > 0
    assert pool.trim() == stats.reserved_bytes
    assert pool.stats().reserved_bytes == 0
    ctx.close()
