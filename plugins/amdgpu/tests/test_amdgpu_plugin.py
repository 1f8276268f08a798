"""The plugin's v1 hooks on the fake HIP driver: the code paths a GPU would run, without one."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from amdgpu_test_support import conformance_images, fake_backend
from pyoffload.backend import (
    HOOK_API,
    INFO_KEYS,
    KERNEL_ATTRIBUTE_KEYS,
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


def _queue(device, profiling=False):
    return P.queue_create_impl((device,), device, profiling)


def _write(device, queue, ptr, data):
    P.data_submit_impl(device, queue, ptr, memoryview(data).cast("B"), data.nbytes)
    P.queue_synchronize_impl(device, queue)


def _read(device, queue, ptr, dtype, count):
    out = np.zeros(count, dtype)
    P.data_retrieve_impl(device, queue, memoryview(out).cast("B"), ptr, out.nbytes)
    P.queue_synchronize_impl(device, queue)
    return out


def _launch(device, queue, kernel, grid, block, *args):
    kinds = tuple(
        "local"
        if isinstance(a, LocalMemory)
        else "ptr"
        if isinstance(a, int)
        else f"{a.dtype.kind}{8 * a.dtype.itemsize}"
        for a in args
    )
    P.launch_impl(device, queue, kernel, grid, block, P.kernel_packer_impl(device, kernel, kinds)(args))


def test_the_plugin_declares_the_contract_it_implements():
    assert P.HOOK_API == HOOK_API


def test_init_reports_every_device_with_standard_info(monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_AMDGPU_FAKE_DEVICES", "3")
    monkeypatch.setenv("PYOFFLOAD_AMDGPU_DRIVER", "fake")
    platforms = P.init_impl()
    try:
        devices = [d.handle for d in platforms[0].devices]
        assert len(devices) == 3 and platforms[0].vendor == "AMD"
        info = P.device_info_impl(devices[2])
        assert {k for k in info if not k.startswith("amdgpu.")} <= set(INFO_KEYS)
        assert info["amdgpu.architecture"] == "gfx90a" and info["amdgpu.gcn_arch_name"].startswith("gfx90a:")
        assert info["global_memory_bytes"] == 4 << 30 and info["compute_units"] == 104
        assert info["max_work_group_size"] == 1024 and info["max_work_item_sizes"] == (1024, 1024, 1024)
        assert info["max_grid_size"][0] == 2**31 - 1 and info["sub_group_size"] == 64
        assert info["memory_kinds"] == ("DEVICE", "HOST", "MANAGED") and info["amdgpu.ordinal"] == 2
    finally:
        P.deinit_impl()


def test_every_kind_allocates_and_frees(backend):
    fake, (d0, d1) = backend
    ctx = (d0, d1)
    device = P.data_alloc_impl(ctx, d1, 64, AllocKind.DEVICE)
    host = P.data_alloc_impl(ctx, None, 64, AllocKind.HOST)
    managed = P.data_alloc_impl(ctx, d1, 64, AllocKind.MANAGED)
    assert fake.space.find(device).device == 1  # made current before hipMalloc
    ctypes.memset(host, 1, 64)  # HOST and MANAGED are host-accessible at their address
    ctypes.memset(managed, 2, 64)
    for ptr, kind in ((device, AllocKind.DEVICE), (host, AllocKind.HOST), (managed, AllocKind.MANAGED)):
        P.data_free_impl(ctx, None if kind is AllocKind.HOST else d1, ptr, kind)


def test_out_of_memory_maps_to_out_of_resources(monkeypatch):
    with fake_backend(monkeypatch, memory_per_device=1 << 20) as (_, (d0, _)):
        with pytest.raises(OutOfResourcesError, match="hipErrorOutOfMemory"):
            P.data_alloc_impl((d0,), d0, 2 << 20, AllocKind.DEVICE)


def test_enqueue_hooks_return_nothing_and_run_asynchronously(backend):
    fake, (d0, _) = backend
    queue = _queue(d0)
    ptr = P.data_alloc_impl((d0,), d0, 16, AllocKind.DEVICE)
    gate = threading.Event()
    assert P.enqueue_host_function_impl(d0, queue, gate.wait) is True
    assert P.data_fill_impl(d0, queue, ptr, b"\x01\x02\x03\x04", 16) is None
    assert P.queue_query_impl(d0, queue) is False  # held back by the host function
    event = P.event_record_impl(d0, queue)
    assert P.event_query_impl(d0, event) is False
    gate.set()
    P.event_wait_impl(d0, event)
    assert P.event_query_impl(d0, event) and P.queue_query_impl(d0, queue)
    assert bytes(_read(d0, queue, ptr, np.uint8, 16)) == b"\x01\x02\x03\x04" * 4
    P.event_release_impl(d0, event)
    P.queue_destroy_impl(d0, queue)
    P.data_free_impl((d0,), d0, ptr, AllocKind.DEVICE)
    assert fake.calls["hipEventDestroy"] == 1


def test_fill_uses_the_memset_of_the_patterns_width(backend):
    fake, (d0, _) = backend
    queue = _queue(d0)
    ptr = P.data_alloc_impl((d0,), d0, 16, AllocKind.DEVICE)
    P.data_fill_impl(d0, queue, ptr, b"\xaa\xbb", 16)
    P.data_fill_impl(d0, queue, ptr, b"\x05", 4)
    assert bytes(_read(d0, queue, ptr, np.uint8, 8)) == b"\x05" * 4 + b"\xaa\xbb" * 2
    for pattern in (b"123", b"12345678"):
        with pytest.raises(UnsupportedError):
            P.data_fill_impl(d0, queue, ptr, pattern, 24)
    with pytest.raises(UnsupportedError, match="alignment"):
        P.data_fill_impl(d0, queue, ptr + 1, b"\x01\x02", 2)
    assert fake.calls["hipMemsetD16Async"] == fake.calls["hipMemsetD8Async"] == 1
    P.queue_destroy_impl(d0, queue)
    P.data_free_impl((d0,), d0, ptr, AllocKind.DEVICE)


def test_rect_copy_and_fill_use_hip_2d_calls(backend):
    """A 2D copy is one hipMemcpy2DAsync, a byte fill one hipMemset2DAsync; 3D copies and wider
    patterns are UNSUPPORTED (the generic layer goes row by row); the fake refuses a width above
    a pitch as HIP documents (hipErrorInvalidPitchValue)."""
    fake, (d0, _) = backend
    queue = _queue(d0)
    ptr = P.data_alloc_impl((d0,), d0, 128, AllocKind.DEVICE)
    _write(d0, queue, ptr, np.zeros(128, np.uint8))
    src = np.arange(40, dtype=np.uint8)  # 4 rows of 10 bytes
    P.memcpy_rect_impl(d0, queue, ptr, 32, 128, memoryview(src), 10, 40, 6, 4, 1)
    P.memfill_rect_impl(d0, queue, ptr + 8, 32, b"\x07", 3, 4)
    out = _read(d0, queue, ptr, np.uint8, 128).reshape(4, 32)
    assert np.array_equal(out[:, :6], src.reshape(4, 10)[:, :6])
    assert (out[:, 6:8] == 0).all() and (out[:, 8:11] == 7).all() and (out[:, 11:] == 0).all()
    back = np.zeros(24, np.uint8)
    P.memcpy_rect_impl(d0, queue, memoryview(back), 6, 24, ptr, 32, 128, 6, 4, 1)
    P.queue_synchronize_impl(d0, queue)
    assert np.array_equal(back.reshape(4, 6), out[:, :6])
    assert fake.calls["hipMemcpy2DAsync"] == 2 and fake.calls["hipMemset2DAsync"] == 1
    with pytest.raises(UnsupportedError):
        P.memcpy_rect_impl(d0, queue, ptr, 32, 64, memoryview(src), 10, 20, 6, 2, 2)
    with pytest.raises(UnsupportedError):
        P.memfill_rect_impl(d0, queue, ptr, 32, b"\x01\x02", 4, 2)
    hip = fake
    assert hip.hipMemcpy2DAsync(ptr, 4, src, 10, 6, 2, hip.hipMemcpyKind.hipMemcpyHostToDevice, None)[0] == (
        hip.hipError_t.hipErrorInvalidPitchValue
    )
    assert hip.hipMemset2DAsync(ptr, 4, 0, 6, 2, None)[0] == hip.hipError_t.hipErrorInvalidValue
    assert [v.split(":")[0] for v in fake.violations] == ["hipMemcpy2DAsync", "hipMemset2DAsync"]
    fake.violations.clear()  # the two misuses above were on purpose
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
    queue = _queue(d1)
    P.data_prefetch_impl(d1, queue, managed, 8192, True)
    P.queue_synchronize_impl(d1, queue)
    assert fake.managed_location[managed] == 1
    P.data_prefetch_impl(d1, queue, managed, 8192, False)
    P.queue_synchronize_impl(d1, queue)
    assert fake.managed_location[managed] == fake.hipCpuDeviceId
    P.data_advise_impl(d1, managed, 8192, MemAdvice.SET_PREFERRED_LOCATION)
    assert fake.managed_advice[managed] == [(fake.hipMemoryAdvise.hipMemAdviseSetPreferredLocation, 1)]
    P.queue_destroy_impl(d1, queue)
    P.data_free_impl((d0, d1), d1, managed, AllocKind.MANAGED)


def test_stream_ordered_allocation_only_for_device_memory(backend):
    fake, (d0, _) = backend
    queue = _queue(d0)
    assert P.data_alloc_async_impl((d0,), None, queue, 64, AllocKind.HOST) is None
    ptr = P.data_alloc_async_impl((d0,), d0, queue, 64, AllocKind.DEVICE)
    plain = P.data_alloc_impl((d0,), d0, 64, AllocKind.DEVICE)
    assert P.data_free_async_impl((d0,), d0, queue, plain, AllocKind.DEVICE) is None  # not from the pool
    assert P.data_free_async_impl((d0,), d0, queue, ptr, AllocKind.DEVICE) is True
    P.queue_synchronize_impl(d0, queue)
    assert fake.space.find(ptr).freed
    P.data_free_impl((d0,), d0, plain, AllocKind.DEVICE)
    P.queue_destroy_impl(d0, queue)


def test_memory_connection_enables_peer_access(monkeypatch):
    with fake_backend(monkeypatch) as (fake, (d0, d1)):
        ctx = (d0, d1)
        assert P.memory_connection_impl(ctx, d0, ctx, d1) is MemoryConnection.UNIFIED
        assert fake.peers == {(0, 1), (1, 0)}
        assert P.memory_connection_impl(ctx, d1, ctx, d0) is MemoryConnection.UNIFIED  # already enabled
        assert P.memory_connection_impl(ctx, d0, ctx, None) is MemoryConnection.UNIFIED
        assert P.memory_connection_impl(ctx, d0, (d0, d1), d0) is None  # another context: generic rule
    with fake_backend(monkeypatch, peer_capable=False) as (fake, (d0, d1)):
        ctx = (d0, d1)
        assert P.memory_connection_impl(ctx, d0, ctx, d1) is MemoryConnection.MIGRATABLE
        assert fake.peers == set()


def test_exchange_copies_within_and_between_devices(backend):
    fake, (d0, d1) = backend
    ctx = (d0, d1)
    src = P.data_alloc_impl(ctx, d0, 1024, AllocKind.DEVICE)
    dst = P.data_alloc_impl(ctx, d1, 1024, AllocKind.DEVICE)
    data = np.arange(256, dtype=np.int32)
    q0, q1 = _queue(d0), _queue(d1)
    _write(d0, q0, src, data)
    P.data_exchange_impl(d0, src, d1, dst, 1024, q1)
    P.data_exchange_impl(d1, dst, d1, dst + 512, 512, q1)
    assert np.array_equal(_read(d1, q1, dst, np.int32, 256), np.concatenate([data[:128], data[:128]]))
    assert fake.calls["hipMemcpyPeerAsync"] == 1
    for device, queue in ((d0, q0), (d1, q1)):
        P.queue_destroy_impl(device, queue)
    P.data_free_impl(ctx, d0, src, AllocKind.DEVICE)
    P.data_free_impl(ctx, d1, dst, AllocKind.DEVICE)


def test_programs_symbols_globals_and_attributes(backend):
    _, (d0, _) = backend
    program = P.load_binary_impl((d0,), d0, conformance_images()["kernels"])
    symbols = {s.name: s for s in P.get_symbols_impl(d0, program)}
    assert symbols["table"].kind is SymbolKind.GLOBAL and symbols["table"].size == 64
    assert symbols["iota_i32"].kind is SymbolKind.KERNEL
    assert P.global_init_fini_impl(d0, program) == InitFini()
    address, size = P.get_global_impl(d0, program, "table")
    queue = _queue(d0)
    assert size == 64 and np.array_equal(_read(d0, queue, address, np.int32, 16), np.arange(16))
    with pytest.raises(NotFoundError, match="'nowhere'"):
        P.get_global_impl(d0, program, "nowhere")
    kernel = P.get_kernel_impl(d0, program, "axpy_f32")
    assert P.kernel_signature_impl(d0, kernel) == ("ptr", "ptr", "f32", "i32")
    attributes = P.kernel_attributes_impl(d0, kernel)
    assert set(KERNEL_ATTRIBUTE_KEYS) <= set(attributes)
    assert attributes["max_work_group_size"] == 1024 and attributes["preferred_work_group_multiple"] == 64
    assert attributes["registers"] > 0 and attributes["amdgpu.sgpr_count"] > 0
    assert P.native_handle_impl("kernel", kernel) is kernel.function
    P.queue_destroy_impl(d0, queue)
    P.unload_binary_impl(d0, program)


def test_conformance_kernels_through_the_hooks(backend):
    _, (d0, _) = backend
    ctx = (d0,)
    queue = _queue(d0)
    program = P.load_binary_impl(ctx, d0, conformance_images()["kernels"])
    out = P.data_alloc_impl(ctx, d0, 8 * 10, AllocKind.DEVICE)
    _launch(
        d0,
        queue,
        P.get_kernel_impl(d0, program, "scalars"),
        (1, 1, 1),
        (1, 1, 1),
        out,
        np.int8(-1),
        np.int16(-2),
        np.int32(-3),
        np.int64(-4),
        np.float32(0.5),
        np.float64(0.25),
        np.uint8(200),
        np.uint16(60000),
        np.uint32(3_000_000_000),
        np.uint64(2**40),
    )
    assert _read(d0, queue, out, np.float64, 10).tolist() == [-1, -2, -3, -4, 0.5, 0.25, 200, 60000, 3e9, 2.0**40]
    x = P.data_alloc_impl(ctx, d0, 4 * 100, AllocKind.DEVICE)
    y = P.data_alloc_impl(ctx, d0, 4 * 100, AllocKind.DEVICE)
    _write(d0, queue, x, np.arange(100, dtype=np.float32))
    _write(d0, queue, y, np.ones(100, dtype=np.float32))
    axpy = P.get_kernel_impl(d0, program, "axpy_f32")
    packed = P.kernel_packer_impl(d0, axpy, ("ptr", "ptr", "f32", "i32"))((y, x, np.float32(2.0), np.int32(100)))
    prepared = P.launch_prepare_impl(d0, queue, axpy, (4, 1, 1), (32, 1, 1), packed)
    del packed
    prepared()
    prepared()
    assert np.array_equal(_read(d0, queue, y, np.float32, 100), 1 + 4 * np.arange(100, dtype=np.float32))
    _launch(
        d0,
        queue,
        P.get_kernel_impl(d0, program, "local_reverse"),
        (2, 1, 1),
        (50, 1, 1),
        y,
        x,
        LocalMemory(200),
        np.int32(100),
        np.int32(50),
    )
    expected = np.concatenate([np.arange(49, -1, -1), np.arange(99, 49, -1)]).astype(np.float32)
    assert np.array_equal(_read(d0, queue, y, np.float32, 100), expected)  # int32 moves of floats
    P.queue_destroy_impl(d0, queue)
    for ptr in (out, x, y):
        P.data_free_impl(ctx, d0, ptr, AllocKind.DEVICE)
    P.unload_binary_impl(d0, program)


def test_constructors_and_destructors_run_through_the_entry_points(backend):
    _, (d0, _) = backend
    ctx = (d0,)
    queue = _queue(d0)
    program = P.load_binary_impl(ctx, d0, conformance_images()["ctor_dtor"])
    entry = P.global_init_fini_impl(d0, program)
    assert entry == InitFini(init=("amdgcn.device.init",), fini=("amdgcn.device.fini",))
    for name in entry.init:
        _launch(d0, queue, P.get_kernel_impl(d0, program, name), (1, 1, 1), (1, 1, 1))
    out = P.data_alloc_impl(ctx, None, 8, AllocKind.HOST)
    _launch(d0, queue, P.get_kernel_impl(d0, program, "get_state"), (1, 1, 1), (1, 1, 1), out)
    P.queue_synchronize_impl(d0, queue)
    assert list((ctypes.c_int32 * 2).from_address(out)) == [42, 1]
    _launch(d0, queue, P.get_kernel_impl(d0, program, "set_dtor_out"), (1, 1, 1), (1, 1, 1), out)
    for name in entry.fini:
        _launch(d0, queue, P.get_kernel_impl(d0, program, name), (1, 1, 1), (1, 1, 1))
    P.queue_synchronize_impl(d0, queue)
    assert list((ctypes.c_int32 * 2).from_address(out)) == [215, 1]
    P.queue_destroy_impl(d0, queue)
    P.unload_binary_impl(d0, program)
    P.data_free_impl(ctx, None, out, AllocKind.HOST)


def test_host_functions_run_off_hips_callback_thread_in_order(backend):
    fake, (d0, _) = backend
    queue, other = _queue(d0), _queue(d0)
    ptr = P.data_alloc_impl((d0,), d0, 4, AllocKind.DEVICE)
    seen = []
    P.data_fill_impl(d0, queue, ptr, b"\x07", 4)
    # The host function calls HIP (a copy on another queue): HIP forbids that on its callback
    # thread, and the fake records it as a violation if the plugin ran it there.
    P.enqueue_host_function_impl(d0, queue, lambda: seen.append(bytes(_read(d0, other, ptr, np.uint8, 4))))
    P.queue_synchronize_impl(d0, queue)
    assert seen == [b"\x07" * 4] and fake.violations == [] and P._host_functions == {}
    for q in (queue, other):
        P.queue_destroy_impl(d0, q)
    P.data_free_impl((d0,), d0, ptr, AllocKind.DEVICE)


def test_queues_wait_for_events_of_other_devices_natively(backend):
    fake, (d0, d1) = backend
    q0, q1 = _queue(d0), _queue(d1)
    gate = threading.Event()
    P.enqueue_host_function_impl(d0, q0, gate.wait)
    event = P.event_record_impl(d0, q0)
    assert P.queue_wait_events_impl(d1, q1, [event]) is True
    after = P.event_record_impl(d1, q1)
    assert not P.event_query_impl(d1, after)  # q1 waits for q0's gate, the host does not
    gate.set()
    P.event_wait_impl(d1, after)
    assert fake.calls["hipStreamWaitEvent"] == 1
    for device, ev in ((d0, event), (d1, after)):
        P.event_release_impl(device, ev)
    for device, queue in ((d0, q0), (d1, q1)):
        P.queue_destroy_impl(device, queue)


def test_events_from_a_thread_that_never_chose_a_device(backend):
    fake, (d0, d1) = backend
    queue = _queue(d1)
    events = []
    worker = threading.Thread(target=lambda: events.append(P.event_record_impl(d1, queue)))
    worker.start()
    worker.join()
    P.event_wait_impl(d1, events[0])
    P.event_release_impl(d1, events[0])
    P.queue_destroy_impl(d1, queue)
    # Without hipSetDevice the event would belong to device 0 and HIP would refuse the record.
    fake.hipSetDevice(0)
    stray = fake.hipEventCreateWithFlags(0)[1]
    err = fake.hipEventRecord(stray, _queue(d1).stream)[0]
    assert err == fake.hipError_t.hipErrorInvalidHandle
    fake.violations.clear()
    fake.hipEventDestroy(stray)
    fake._streams[-1].stop()  # the stray queue of the check


def test_kernel_faults_surface_at_every_later_wait(backend):
    _, (d0, d1) = backend
    queue = _queue(d0)
    program = P.load_binary_impl((d0,), d0, conformance_images()["kernels"])
    remote = P.data_alloc_impl((d1,), d1, 4, AllocKind.DEVICE)
    _launch(d0, queue, P.get_kernel_impl(d0, program, "bump"), (1, 1, 1), (1, 1, 1), remote)  # no peer access
    event = P.event_record_impl(d0, queue)
    with pytest.raises(BackendError, match="hipErrorIllegalAddress"):
        P.event_wait_impl(d0, event)
    with pytest.raises(BackendError, match="hipErrorIllegalAddress"):
        P.queue_synchronize_impl(d0, queue)
    P.event_release_impl(d0, event)
    P.queue_destroy_impl(d0, queue)
    P.data_free_impl((d1,), d1, remote, AllocKind.DEVICE)
    P.unload_binary_impl(d0, program)
    _.violations[:] = [v for v in _.violations if "without peer access" not in v]


def test_elapsed_time_between_events_of_a_profiling_queue(backend):
    _, (d0, _) = backend
    queue = _queue(d0, profiling=True)
    start = P.event_record_impl(d0, queue)
    end = P.event_record_impl(d0, queue)
    P.event_wait_impl(d0, end)
    assert P.event_elapsed_impl(d0, start, end) >= 0.0
    for event in (start, end):
        P.event_release_impl(d0, event)
    P.queue_destroy_impl(d0, queue)


def test_borrowed_queues_are_not_destroyed(backend):
    fake, (d0, _) = backend
    native = P.native_handle_impl("queue", _queue(d0))
    assert isinstance(native, int)
    borrowed = P.queue_from_native_impl((d0,), d0, native, False)
    P.enqueue_host_function_impl(d0, borrowed, lambda: None)
    P.queue_synchronize_impl(d0, borrowed)
    P.queue_destroy_impl(d0, borrowed)
    assert fake.calls.get("hipStreamDestroy", 0) == 0
    fake.hipStreamDestroy(native)


def test_events_still_held_at_deinit_are_destroyed(monkeypatch):
    with fake_backend(monkeypatch) as (fake, (d0, _)):
        queue = _queue(d0)
        kept = P.event_record_impl(d0, queue)
        P.queue_synchronize_impl(d0, queue)
        P.queue_destroy_impl(d0, queue)
    assert fake.calls["hipEventDestroy"] == 1 and kept.destroyed
    P.event_release_impl(d0, kept)  # released after deinit (a finaliser): nothing left to do
    assert fake.violations == []
