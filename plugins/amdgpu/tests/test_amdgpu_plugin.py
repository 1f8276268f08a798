"""The plugin's hooks on the fake HIP driver: the code paths a GPU would run, without one."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
from amdgpu_test_support import conformance_images, fake_backend
from pyoffload.backend import (
    AllocKind,
    BackendError,
    InitFini,
    LocalMemory,
    MemAdvice,
    MemoryConnection,
    NotFoundError,
    OutOfResourcesError,
    SymbolKind,
    UnsupportedError,
)

from pyoffload_amdgpu import plugin as P


@pytest.fixture
def backend(monkeypatch):
    with fake_backend(monkeypatch) as (fake, devices):
        yield fake, devices
    assert fake.violations == [], fake.violations  # deinit left nothing behind, misused nothing


def _read(device, ptr, dtype, count):
    out = np.zeros(count, dtype)
    P.data_retrieve_impl(device, None, memoryview(out).cast("B"), ptr, out.nbytes)
    return out


def test_init_reports_every_device_with_its_info(monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_AMDGPU_FAKE_DEVICES", "3")
    monkeypatch.setenv("PYOFFLOAD_AMDGPU_DRIVER", "fake")
    platforms = P.init_impl()
    try:
        devices = [d.handle for d in platforms[0].devices]
        assert len(devices) == 3 and platforms[0].vendor == "AMD"
        info = P.device_info_impl(devices[2])
        assert info["architecture"] == "gfx90a" and info["gcn_arch_name"].startswith("gfx90a:")
        assert info["memory_bytes"] == 4 << 30 and info["compute_units"] == 104
        assert info["max_work_group_size"] == 1024 and info["driver_version"] > 0
    finally:
        P.deinit_impl()


def test_every_kind_allocates_and_frees(backend):
    fake, (d0, d1) = backend
    ctx = (d0, d1)
    device = P.data_alloc_impl(ctx, d0, 64, AllocKind.DEVICE)
    host = P.data_alloc_impl(ctx, None, 64, AllocKind.HOST)
    managed = P.data_alloc_impl(ctx, d1, 64, AllocKind.MANAGED)
    assert fake.space.find(device).device == 0
    ctypes.memset(host, 1, 64)  # HOST and MANAGED are host-accessible at their address
    ctypes.memset(managed, 2, 64)
    assert fake.calls["hipHostMalloc"] == fake.calls["hipMallocManaged"] == 1
    P.data_free_impl(ctx, d0, device, AllocKind.DEVICE)
    P.data_free_impl(ctx, None, host, AllocKind.HOST)
    P.data_free_impl(ctx, d1, managed, AllocKind.MANAGED)


def test_managed_memory_is_unsupported_where_the_device_lacks_it(backend):
    _, (d0, _) = backend
    d0.managed_memory = False
    with pytest.raises(UnsupportedError, match="managed"):
        P.data_alloc_impl((d0,), d0, 64, AllocKind.MANAGED)


def test_out_of_memory_maps_to_out_of_resources(monkeypatch):
    with fake_backend(monkeypatch, memory_per_device=1 << 20) as (_, (d0, _)):
        with pytest.raises(OutOfResourcesError, match="hipErrorOutOfMemory"):
            P.data_alloc_impl((d0,), d0, 2 << 20, AllocKind.DEVICE)


def test_fill_uses_the_memset_width_and_refuses_others(backend):
    fake, (d0, _) = backend
    ptr = P.data_alloc_impl((d0,), d0, 16, AllocKind.DEVICE)
    P.data_fill_impl(d0, None, ptr, b"\x01\x02\x03\x04", 16)
    assert bytes(_read(d0, ptr, np.uint8, 16)) == b"\x01\x02\x03\x04" * 4
    queue = P.queue_create_impl((d0,), d0, False)
    P.event_wait_impl(d0, P.data_fill_impl(d0, queue, ptr, b"\xaa\xbb", 8))
    assert bytes(_read(d0, ptr, np.uint8, 16)) == b"\xaa\xbb" * 4 + b"\x01\x02\x03\x04" * 2
    P.data_fill_impl(d0, None, ptr, b"\x05\x06" * 4, 8)  # repeats a 2-byte pattern: hipMemsetD16
    assert bytes(_read(d0, ptr, np.uint8, 8)) == b"\x05\x06" * 4
    for pattern in (b"123", b"12345678"):
        with pytest.raises(UnsupportedError):
            P.data_fill_impl(d0, None, ptr, pattern, 24)
    with pytest.raises(UnsupportedError, match="aligned"):
        P.data_fill_impl(d0, None, ptr + 1, b"\x01\x02", 2)
    assert fake.calls["hipMemsetD32"] == fake.calls["hipMemsetD16Async"] == fake.calls["hipMemsetD16"] == 1
    P.queue_destroy_impl(d0, queue)
    P.data_free_impl((d0,), d0, ptr, AllocKind.DEVICE)


def test_lock_returns_the_device_pointer_hip_gives(monkeypatch):
    with fake_backend(monkeypatch, separate_register_alias=True) as (fake, (d0, _)):
        buf = np.zeros(256, np.uint8)
        device_ptr = P.data_lock_impl(d0, buf.ctypes.data, 256)
        assert device_ptr != buf.ctypes.data and fake.space.find(device_ptr).host_address == buf.ctypes.data
        assert P.data_pinned_info_impl(d0, buf.ctypes.data + 100) == (buf.ctypes.data, 256, device_ptr)
        P.data_unlock_impl(d0, buf.ctypes.data)
        assert P.data_pinned_info_impl(d0, buf.ctypes.data) is None
        assert fake.violations == []


def test_pinned_query_recognises_vendor_pinned_memory(backend):
    _, (d0, _) = backend
    host = P.data_alloc_impl((d0,), None, 4096, AllocKind.HOST)
    assert P.data_pinned_info_impl(d0, host + 10) == (host, 4096, host)
    assert P.data_pinned_info_impl(d0, np.zeros(8).ctypes.data) is None
    P.data_free_impl((d0,), None, host, AllocKind.HOST)


def test_prefetch_and_advise_reach_the_driver(backend):
    fake, (d0, d1) = backend
    managed = P.data_alloc_impl((d0, d1), d1, 8192, AllocKind.MANAGED)
    P.data_prefetch_impl(d1, None, managed, 8192, True)
    assert fake.managed_location[managed] == 1
    queue = P.queue_create_impl((d0, d1), d0, False)
    P.event_wait_impl(d0, P.data_prefetch_impl(d0, queue, managed, 8192, False))
    assert fake.managed_location[managed] == fake.hipCpuDeviceId
    P.data_advise_impl(d1, managed, 8192, MemAdvice.SET_PREFERRED_LOCATION)
    assert fake.managed_advice[managed] == [(fake.hipMemoryAdvise.hipMemAdviseSetPreferredLocation, 1)]
    P.queue_destroy_impl(d0, queue)
    P.data_free_impl((d0, d1), d1, managed, AllocKind.MANAGED)


def test_stream_ordered_allocation_only_for_device_memory(backend):
    _, (d0, _) = backend
    queue = P.queue_create_impl((d0,), d0, False)
    assert P.data_alloc_async_impl((d0,), None, queue, 64, AllocKind.HOST) is None
    ptr = P.data_alloc_async_impl((d0,), d0, queue, 64, AllocKind.DEVICE)
    plain = P.data_alloc_impl((d0,), d0, 64, AllocKind.DEVICE)
    assert P.data_free_async_impl((d0,), d0, queue, plain, AllocKind.DEVICE) is None  # not from the pool
    event = P.data_free_async_impl((d0,), d0, queue, ptr, AllocKind.DEVICE)
    P.event_wait_impl(d0, event)
    P.data_free_impl((d0,), d0, plain, AllocKind.DEVICE)
    P.queue_destroy_impl(d0, queue)


def test_memory_connection_follows_peer_access(monkeypatch):
    with fake_backend(monkeypatch) as (fake, (d0, d1)):
        ctx = (d0, d1)
        assert P.memory_connection_impl(ctx, d0, ctx, d1) is MemoryConnection.UNIFIED
        assert fake.peers == {(0, 1), (1, 0)}
        assert P.memory_connection_impl(ctx, d0, ctx, None) is MemoryConnection.UNIFIED
        assert P.memory_connection_impl(ctx, d0, (d0, d1), d0) is None  # another context: generic rule
    with fake_backend(monkeypatch, peer_capable=False) as (fake, (d0, d1)):
        ctx = (d0, d1)
        assert P.memory_connection_impl(ctx, d0, ctx, d1) is MemoryConnection.MIGRATABLE
        assert fake.peers == set()


def test_exchange_copies_between_devices(backend):
    fake, (d0, d1) = backend
    ctx = (d0, d1)
    src = P.data_alloc_impl(ctx, d0, 1024, AllocKind.DEVICE)
    dst = P.data_alloc_impl(ctx, d1, 1024, AllocKind.DEVICE)
    data = np.arange(256, dtype=np.int32)
    P.data_submit_impl(d0, None, src, memoryview(data).cast("B"), 1024)
    P.data_exchange_impl(d0, src, d1, dst, 1024, None)
    assert np.array_equal(_read(d1, dst, np.int32, 256), data)
    queue = P.queue_create_impl(ctx, d1, False)
    assert P.data_exchange_impl(d1, dst, d0, src, 512, None) is None  # synchronous without a queue
    P.event_wait_impl(d1, P.data_exchange_impl(d0, src, d1, dst + 512, 512, queue))
    assert np.array_equal(_read(d1, dst, np.int32, 256), np.concatenate([data[:128], data[:128]]))
    assert fake.calls["hipMemcpyPeer"] == 2 and fake.calls["hipMemcpyPeerAsync"] == 1
    P.queue_destroy_impl(d1, queue)
    P.data_free_impl(ctx, d0, src, AllocKind.DEVICE)
    P.data_free_impl(ctx, d1, dst, AllocKind.DEVICE)


def test_programs_symbols_and_globals(backend):
    _, (d0, _) = backend
    program = P.load_binary_impl((d0,), d0, conformance_images()["kernels"])
    symbols = {s.name: s for s in P.get_symbols_impl(d0, program)}
    assert symbols["table"].kind is SymbolKind.GLOBAL and symbols["table"].size == 64
    assert symbols["iota_i32"].kind is SymbolKind.KERNEL
    assert P.global_init_fini_impl(d0, program) == InitFini()
    address, size = P.get_global_impl(d0, program, "table")
    assert size == 64 and np.array_equal(_read(d0, address, np.int32, 16), np.arange(16))
    with pytest.raises(NotFoundError, match="'nothing'"):
        P.get_kernel_impl(d0, program, "nothing")
    with pytest.raises(NotFoundError, match="'nowhere'"):
        P.get_global_impl(d0, program, "nowhere")
    kernel = P.get_kernel_impl(d0, program, "axpy_f32")
    assert P.kernel_signature_impl(d0, kernel) == ("ptr", "ptr", "f32", "i32")
    P.unload_binary_impl(d0, program)


def test_conformance_kernels_through_the_hooks(backend):
    _, (d0, _) = backend
    ctx = (d0,)
    program = P.load_binary_impl(ctx, d0, conformance_images()["kernels"])
    out = P.data_alloc_impl(ctx, d0, 8 * 10, AllocKind.DEVICE)
    scalars = P.get_kernel_impl(d0, program, "scalars")
    args = (out, np.int8(-1), np.int16(-2), np.int32(-3), np.int64(-4), np.float32(0.5), np.float64(0.25),
            np.uint8(200), np.uint16(60000), np.uint32(3_000_000_000), np.uint64(2**40))
    P.launch_impl(d0, None, scalars, (1, 1, 1), (1, 1, 1), args)
    assert _read(d0, out, np.float64, 10).tolist() == [-1, -2, -3, -4, 0.5, 0.25, 200, 60000, 3e9, 2.0**40]
    x = P.data_alloc_impl(ctx, d0, 4 * 100, AllocKind.DEVICE)
    y = P.data_alloc_impl(ctx, d0, 4 * 100, AllocKind.DEVICE)
    P.data_submit_impl(d0, None, x, memoryview(np.arange(100, dtype=np.float32)).cast("B"), 400)
    P.data_submit_impl(d0, None, y, memoryview(np.ones(100, dtype=np.float32)).cast("B"), 400)
    queue = P.queue_create_impl(ctx, d0, False)
    prepared = P.launch_prepare_impl(d0, queue, P.get_kernel_impl(d0, program, "axpy_f32"), (4, 1, 1), (32, 1, 1),
                                     (y, x, np.float32(2.0), np.int32(100)))
    prepared()
    P.event_wait_impl(d0, prepared())
    assert np.array_equal(_read(d0, y, np.float32, 100), 1 + 4 * np.arange(100, dtype=np.float32))
    reverse = P.get_kernel_impl(d0, program, "local_reverse")
    P.launch_impl(d0, queue, reverse, (2, 1, 1), (50, 1, 1), (y, x, LocalMemory(200), np.int32(100), np.int32(50)))
    P.queue_synchronize_impl(d0, queue)
    expected = np.concatenate([np.arange(49, -1, -1), np.arange(99, 49, -1)]).astype(np.float32)
    assert np.array_equal(_read(d0, y, np.float32, 100), expected)  # the bytes are int32 moves of floats
    P.queue_destroy_impl(d0, queue)
    for ptr in (out, x, y):
        P.data_free_impl(ctx, d0, ptr, AllocKind.DEVICE)
    P.unload_binary_impl(d0, program)


def test_constructors_and_destructors_run_through_the_entry_points(backend):
    _, (d0, _) = backend
    ctx = (d0,)
    program = P.load_binary_impl(ctx, d0, conformance_images()["ctor_dtor"])
    entry = P.global_init_fini_impl(d0, program)
    assert entry == InitFini(init=("amdgcn.device.init",), fini=("amdgcn.device.fini",))
    for name in entry.init:
        P.launch_impl(d0, None, P.get_kernel_impl(d0, program, name), (1, 1, 1), (1, 1, 1), ())
    out = P.data_alloc_impl(ctx, None, 8, AllocKind.HOST)
    P.launch_impl(d0, None, P.get_kernel_impl(d0, program, "get_state"), (1, 1, 1), (1, 1, 1), (out,))
    assert list((ctypes.c_int32 * 2).from_address(out)) == [42, 1]
    P.launch_impl(d0, None, P.get_kernel_impl(d0, program, "set_dtor_out"), (1, 1, 1), (1, 1, 1), (out,))
    for name in entry.fini:
        P.launch_impl(d0, None, P.get_kernel_impl(d0, program, name), (1, 1, 1), (1, 1, 1), ())
    assert list((ctypes.c_int32 * 2).from_address(out)) == [215, 1]
    P.unload_binary_impl(d0, program)
    P.data_free_impl(ctx, None, out, AllocKind.HOST)


def test_host_function_errors_surface_at_synchronize(backend):
    _, (d0, _) = backend
    queue = P.queue_create_impl((d0,), d0, False)
    ran = []
    P.enqueue_host_function_impl(d0, queue, lambda: ran.append(True))

    def fail():
        raise ValueError("from the host function")

    P.enqueue_host_function_impl(d0, queue, fail)
    with pytest.raises(BackendError, match="from the host function"):
        P.queue_synchronize_impl(d0, queue)
    assert ran == [True] and queue.callbacks == []
    P.queue_synchronize_impl(d0, queue)  # reported once
    P.queue_destroy_impl(d0, queue)


def test_elapsed_time_needs_a_profiling_queue(backend):
    _, (d0, _) = backend
    plain, timed = P.queue_create_impl((d0,), d0, False), P.queue_create_impl((d0,), d0, True)
    program = P.load_binary_impl((d0,), d0, conformance_images()["kernels"])
    noop = P.get_kernel_impl(d0, program, "noop")
    a, b = (P.launch_impl(d0, plain, noop, (1, 1, 1), (1, 1, 1), ()) for _ in range(2))
    with pytest.raises(UnsupportedError):
        P.event_elapsed_impl(d0, a, b)
    c, d = (P.launch_impl(d0, timed, noop, (1, 1, 1), (1, 1, 1), ()) for _ in range(2))
    P.event_wait_impl(d0, d)
    assert P.event_query_impl(d0, d) and P.event_elapsed_impl(d0, c, d) >= 0.0
    for queue in (plain, timed):
        P.queue_destroy_impl(d0, queue)
    P.unload_binary_impl(d0, program)


def test_events_are_destroyed_when_collected_or_at_deinit(monkeypatch):
    with fake_backend(monkeypatch) as (fake, (d0, _)):
        queue = P.queue_create_impl((d0,), d0, False)
        kept = P.enqueue_host_function_impl(d0, queue, lambda: None)
        dropped = P.enqueue_host_function_impl(d0, queue, lambda: None)
        P.queue_synchronize_impl(d0, queue)
        del dropped
        gc.collect()
        assert fake.calls["hipEventDestroy"] == 1
        P.queue_destroy_impl(d0, queue)
    assert fake.calls["hipEventDestroy"] == 2 and kept is not None
    assert fake.violations == []
