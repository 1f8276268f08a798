"""The plugin's own logic, through pyoffload's public API, on the fake driver."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, LocalMemory, MemoryConnection, OffloadError


def test_devices_and_info(fake_runtime):
    d0, d1 = fake_runtime
    assert d0.id == "cuda-fake-gpu-0" and d1.id == "cuda-fake-gpu-1"
    info = d0.info
    assert info["architecture"] == "sm_80"
    assert info["compute_units"] == 108
    assert info["driver_version"] == "13.0"
    assert info["memory_bytes"] == 1 << 30
    assert info["max_work_group_size"] == 1024


def test_primary_context_is_popped_after_every_call(fake_runtime, driver):
    d0, _ = fake_runtime
    a = d0.alloc(64)
    pyoffload.memcpy(a, np.arange(16, dtype=np.int32))
    a.free()
    assert driver.Context.get_current() is None


def test_peer_access_between_devices_of_one_context(fake_runtime, driver):
    d0, d1 = fake_runtime
    ctx = pyoffload.Context([d0, d1])
    assert pyoffload.memory_connection((ctx, d0), (ctx, d1)) is MemoryConnection.UNIFIED
    c0 = driver.Device(0).retain_primary_context()
    assert c0.peers == {1}
    c0.detach()
    other = pyoffload.Context([d1])
    assert pyoffload.memory_connection((ctx, d0), (other, d1)) is MemoryConnection.NONE
    other.close()
    ctx.close()
    c0 = driver.Device(0).retain_primary_context()
    assert c0.peers == set(), "peer access outlived the context that enabled it"
    c0.detach()


def test_kernel_reads_memory_of_a_peer_device(fake_runtime, driver):
    d0, d1 = fake_runtime
    ctx = pyoffload.Context([d0, d1])
    imgs = d0._disp.conformance_images_impl(d0.handle)
    on_d1 = ctx.alloc(64, device=d1)
    with d0.load_program(imgs["kernels"], context=ctx) as prog, d0.create_queue(context=ctx) as q:
        q.launch(prog.kernel("iota_i32"), 1, 16, [on_d1.ptr, np.int32(16), np.int32(100)]).wait()
    out = np.zeros(16, np.int32)
    pyoffload.memcpy(out, on_d1)
    assert list(out) == list(range(100, 116))
    ctx.close()


def test_missing_symbols_are_not_found(fake_runtime):
    d0, _ = fake_runtime
    imgs = d0._disp.conformance_images_impl(d0.handle)
    with d0.load_program(imgs["ctor_dtor"]) as prog:
        with pytest.raises(OffloadError) as err:
            prog.kernel("iota_i32")  # a kernel of the other program
        assert err.value.errc is Errc.NOT_FOUND and "iota_i32" in str(err.value)
        with pytest.raises(OffloadError) as err:
            prog.global_variable("counter")
        assert err.value.errc is Errc.NOT_FOUND


def test_invalid_image_never_reaches_the_driver(fake_runtime, driver):
    d0, _ = fake_runtime
    before = set(driver.calls)
    with pytest.raises(OffloadError) as err:
        d0.load_program(b"\x7fELF" + bytes(60))
    assert err.value.errc is Errc.INVALID_BINARY
    assert "cuModuleLoadDataEx" not in driver.calls - before


def test_ptx_for_a_newer_gpu_is_a_compile_error(fake_runtime, nvcc):
    from pyoffload_cuda import conformance

    d0, _ = fake_runtime
    ptx = conformance.build("kernels", "ptx", 90, nvcc)
    with pytest.raises(OffloadError) as err:
        d0.load_program(ptx)
    assert err.value.errc is Errc.COMPILE_FAILURE
    assert "sm_90" in err.value.build_log


@pytest.mark.parametrize("fmt", ["cubin", "fatbin"])
def test_other_image_formats_run(fake_runtime, built, fmt):
    d0, _ = fake_runtime
    out = d0.alloc(4 * 8)
    with d0.load_program(built[fmt]["kernels"]) as prog, d0.create_queue() as q:
        q.launch(prog.kernel("iota_i32"), 1, 8, [out, np.int32(8), np.int32(-3)]).wait()
    res = np.zeros(8, np.int32)
    pyoffload.memcpy(res, out)
    assert list(res) == list(range(-3, 5))
    out.free()


@pytest.mark.parametrize("pattern", [b"\x5a", b"\x01\x02", b"\x01\x02\x03\x04", b"\xab" * 8,
                                     b"\x01\x02\x03\x04\x01\x02\x03\x04", b"\x01\x02\x03", bytes(range(8))])
def test_memfill_narrow_or_fallback(fake_runtime, pattern):
    d0, _ = fake_runtime
    a = d0.alloc(48)
    pyoffload.memfill(a, pattern, 48 // len(pattern) * len(pattern))
    out = np.zeros(48, np.uint8)
    pyoffload.memcpy(out, a)
    n = 48 // len(pattern) * len(pattern)
    assert out[:n].tobytes() == pattern * (n // len(pattern))
    a.free()


def test_fill_hook_refuses_what_memset_cannot_do(fake_runtime):
    from pyoffload_cuda import plugin

    d0, _ = fake_runtime
    a = d0.alloc(64)
    with pytest.raises(pyoffload.UnsupportedError):
        plugin.data_fill_impl(d0.handle, None, a.ptr, b"\x01\x02\x03", 63)
    with pytest.raises(pyoffload.UnsupportedError):
        plugin.data_fill_impl(d0.handle, None, a.ptr + 2, b"\x01\x02\x03\x04", 8)  # misaligned d32
    a.free()


def test_local_memory_offsets(fake_runtime):
    from pyoffload_cuda.launch import pack_args

    params, shared = pack_args([5, LocalMemory(10), np.float32(1), LocalMemory(4), None, np.float16(1.5)])
    assert [int(p) for p in params[:2]] == [5, 0]
    assert int(params[3]) == 16 and shared == 20
    assert params[4] == np.uint64(0)
    assert params[5].dtype == np.uint16 and params[5] == np.array(1.5, np.float16).view(np.uint16)


def test_host_function_backlog_keeps_order(fake_runtime):
    d0, _ = fake_runtime
    imgs = d0._disp.conformance_images_impl(d0.handle)
    gate = threading.Event()
    seen = []
    out = d0.alloc(4)
    with d0.load_program(imgs["kernels"]) as prog:
        q = d0.create_queue()
        bump = prog.kernel("bump")
        q.launch_host_function(gate.wait)
        events = [q.launch(bump, 1, 1, [out]) for _ in range(3)]
        q.launch_host_function(lambda: seen.append(int(np.frombuffer(_read(out), np.int32)[0])))
        last = q.launch(bump, 1, 1, [out])
        assert not any(e.is_complete for e in events) and not last.is_complete
        gate.set()
        q.wait()
        assert all(e.is_complete for e in events) and last.is_complete
        assert seen == [3]
        assert int(np.frombuffer(_read(out), np.int32)[0]) == 4
        q.destroy()
    out.free()


def _read(alloc):
    buf = bytearray(alloc.size)
    pyoffload.memcpy(buf, alloc)
    return bytes(buf)


def test_elapsed_time_needs_timed_device_events(fake_runtime):
    from pyoffload_cuda import plugin

    d0, _ = fake_runtime
    imgs = d0._disp.conformance_images_impl(d0.handle)
    with d0.load_program(imgs["kernels"]) as prog, d0.create_queue() as q:
        e1 = q.launch(prog.kernel("noop"), 1, 1, [])
        e2 = q.launch(prog.kernel("noop"), 1, 1, [])
        host = q.launch_host_function(lambda: None)
        q.wait()
        with pytest.raises(pyoffload.UnsupportedError, match="profiling"):
            plugin.event_elapsed_impl(d0.handle, e1.handle, e2.handle)
        with pytest.raises(pyoffload.UnsupportedError, match="host functions"):
            plugin.event_elapsed_impl(d0.handle, e1.handle, host.handle)


def test_lock_gives_the_host_address(fake_runtime, driver):
    d0, _ = fake_runtime
    buf = np.zeros(1024, np.uint8)
    p = d0.lock(buf)
    assert p == buf.ctypes.data  # unified addressing
    assert any(r.kind == "registered" for r in driver.memory.live())
    d0.unlock(buf)
    assert not any(r.kind == "registered" for r in driver.memory.live())


def test_all_kinds_round_trip_and_shutdown_leaves_nothing(fake_runtime, driver):
    d0, d1 = fake_runtime
    for kind in AllocKind:
        a = d1.alloc(256, kind)
        pyoffload.memcpy(a, np.arange(64, dtype=np.int32))
        out = np.zeros(64, np.int32)
        pyoffload.memcpy(out, a)
        assert list(out) == list(range(64))
    q = d1.create_queue()  # left alive on purpose: shutdown must release it
    imgs = d1._disp.conformance_images_impl(d1.handle)
    d1.load_program(imgs["ctor_dtor"])
    pyoffload.shutdown()
    assert driver.leaks == []
    assert driver.memory.live() == []
    del q


def test_driver_calls_exercised(fake_runtime, driver):
    """A small workload reaches the driver entry points the plugin is built on."""
    d0, d1 = fake_runtime
    imgs = d0._disp.conformance_images_impl(d0.handle)
    ctx = pyoffload.Context([d0, d1])
    a, b = ctx.alloc(256, device=d0), ctx.alloc(256, device=d1)
    with d0.load_program(imgs["kernels"], context=ctx) as prog, d0.create_queue(profiling=True, context=ctx) as q:
        e1 = q.launch(prog.kernel("iota_i32"), 1, 64, [a, np.int32(64), np.int32(0)])
        q.memfill(a, b"\x01\x02\x03\x04")
        e2 = q.launch_host_function(lambda: None)
        e3 = q.launch(prog.kernel("noop"), 1, 1, [])
        q.wait()
        assert e3.elapsed_ms(e1) >= 0 and e2.is_complete
    with d1.create_queue(context=ctx) as q1:
        q1.memcpy(b, a).wait()
    pyoffload.memcpy(a, b)
    pyoffload.memcpy(a, np.arange(64, dtype=np.int32))
    out = np.zeros(64, np.int32)
    pyoffload.memcpy(out, a)
    assert list(out) == list(range(64))
    ctx.close()
    expected = {"cuInit", "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent", "cuCtxPopCurrent",
                "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess", "cuMemAlloc", "cuMemFree",
                "cuModuleLoadDataEx", "cuModuleGetFunction", "cuLaunchKernel", "cuStreamCreate",
                "cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventElapsedTime",
                "cuMemcpyPeerAsync", "cuMemcpyPeer", "cuMemsetD32Async", "cuStreamSynchronize",
                "cuMemcpyHtoD", "cuMemcpyDtoH", "cuCtxSynchronize"}
    assert expected <= driver.calls, expected - driver.calls


@pytest.mark.parametrize("fmt", ["ptx", "cubin"])
def test_parameter_sizes_are_checked_before_the_driver(fake_runtime, driver, built, fmt):
    d0, _ = fake_runtime
    out = d0.alloc(8)
    with d0.load_program(built[fmt]["kernels"]) as prog, d0.create_queue() as q:
        launches = len(driver.launches)
        with pytest.raises(OffloadError) as err:
            q.launch(prog.kernel("sleep_spin"), 1, 1, [out, np.int32(5)])  # takes an int64
        assert err.value.errc is Errc.INVALID_ARGUMENT and "[8, 8]" in str(err.value)
        assert len(driver.launches) == launches
        q.launch(prog.kernel("sleep_spin"), 1, 1, [out, np.int64(5)]).wait()
    assert driver.violations == []
    out.free()
