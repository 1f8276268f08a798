"""The plugin's own logic, through pyoffload's public API, on the fake driver."""

from __future__ import annotations

import ctypes
import gc
import struct
import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, LocalMemory, MemoryConnection, OffloadError


def images(device):
    return device.disp.conformance_images_impl(device.handle)


def test_devices_and_info(fake_runtime):
    d0, d1 = fake_runtime
    assert d0.id == "cuda-fake-gpu-0" and d1.id == "cuda-fake-gpu-1"
    info = d0.info
    assert info["cuda.architecture"] == "sm_80" and info["cuda.compute_capability"] == "8.0"
    assert info["compute_units"] == 108 and info["sub_group_size"] == 32
    assert info["driver_version"] == "13.0"
    assert info["global_memory_bytes"] == 1 << 30
    assert info["max_work_group_size"] == 1024 and info["max_work_item_sizes"] == (1024, 1024, 64)
    assert info["max_grid_size"] == (2**31 - 1, 65535, 65535)
    assert info["memory_kinds"] == ("DEVICE", "HOST", "MANAGED")
    assert info["cuda.unified_addressing"] is True
    assert set(pyoffload.backend.INFO_KEYS) <= set(info)


def test_primary_context_is_popped_after_every_call(fake_runtime, driver):
    d0, _ = fake_runtime
    a = d0.alloc(64)
    pyoffload.memcpy(a, np.arange(16, dtype=np.int32))
    a.free()
    assert driver.Context.get_current() is None


def test_a_current_context_is_not_pushed_again(fake_runtime, driver):
    d0, _ = fake_runtime
    ctx = d0.handle.context()
    pushes = []
    ctx.push()
    push, driver.Context.push = driver.Context.push, lambda self: pushes.append(self)
    try:
        a = d0.alloc(64)
        pyoffload.memcpy(a, np.arange(16, dtype=np.int32))
        a.free()
    finally:
        driver.Context.push = push
        driver.Context.pop()
    assert pushes == [] and driver.Context.get_current() is None


def test_peer_access_between_devices_of_one_context(fake_runtime, driver):
    d0, d1 = fake_runtime
    ctx = pyoffload.Context([d0, d1])
    assert pyoffload.memory_connection((ctx, d0), (ctx, d1)) is MemoryConnection.UNIFIED
    assert driver.Device(0).retain_primary_context().peers == {1}
    assert driver.Device(1).retain_primary_context().peers == {0}
    for i in (0, 1):
        driver.Device(i).retain_primary_context().detach()
        driver.Device(i).retain_primary_context().detach()
    other = pyoffload.Context([d1])
    assert pyoffload.memory_connection((ctx, d0), (other, d1)) is MemoryConnection.NONE
    # A second context asks again: peer access that is already enabled is no error.
    again = pyoffload.Context([d0, d1])
    assert pyoffload.memory_connection((again, d1), (again, d0)) is MemoryConnection.UNIFIED
    for c in (again, other, ctx):
        c.close()


def test_kernel_reads_memory_of_a_peer_device(fake_runtime, driver):
    d0, d1 = fake_runtime
    ctx = pyoffload.Context([d0, d1])
    on_d1 = ctx.alloc(64, device=d1)
    with d0.load_program(images(d0)["kernels"], context=ctx) as prog, d0.create_queue(context=ctx) as q:
        q.launch(prog.kernel("iota_i32"), 1, 16, [on_d1.ptr, np.int32(16), np.int32(100)]).wait()
    out = np.zeros(16, np.int32)
    pyoffload.memcpy(out, on_d1)
    assert list(out) == list(range(100, 116))
    ctx.close()


def test_kernels_are_listed_by_plain_name_with_their_signature(fake_runtime):
    d0, _ = fake_runtime
    with d0.load_program(images(d0)["kernels"]) as prog:
        kernels = {s.name for s in prog.symbols() if s.kind is pyoffload.SymbolKind.KERNEL}
        assert kernels == {"noop", "iota_i32", "axpy_f32", "scalars", "local_reverse", "bump", "sleep_spin"}
        assert prog.kernel("local_reverse").signature == ("ptr", "ptr", "local", "i32", "i32")
        assert prog.kernel("sleep_spin").signature == ("ptr", "i64")
        attrs = prog.kernel("iota_i32").attributes
        assert attrs["registers"] == 16 and attrs["preferred_work_group_multiple"] == 32
    with d0.load_program(images(d0)["ctor_dtor"]) as prog:
        assert prog.kernel("get_state").signature == ("ptr",)
        assert {s.name for s in prog.symbols()} >= {"nvptx$device$init", "nvptx$device$fini"}


def test_missing_symbols_are_not_found(fake_runtime):
    d0, _ = fake_runtime
    with d0.load_program(images(d0)["ctor_dtor"]) as prog:
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
    from pyoffload_cuda import nvcc as toolchain

    d0, _ = fake_runtime
    with pytest.raises(OffloadError) as err:
        d0.load_program(toolchain.build("kernels", "ptx", 90, nvcc))
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


def test_build_program_from_source(fake_runtime, nvcc):
    d0, _ = fake_runtime
    source = "__global__ void iota_i32(int *out, int n, int base) { }\n"
    with d0.build_program(source) as prog:
        assert prog.kernel("iota_i32").signature == ("ptr", "i32", "i32")
    assert d0.disp.compiler_id_impl(d0.handle).endswith("sm_80; driver 13000")
    with pytest.raises(OffloadError) as err:
        d0.build_program("__global__ void broken( {}\n")
    assert err.value.errc is Errc.COMPILE_FAILURE and "error" in err.value.build_log


@pytest.mark.parametrize(
    "pattern",
    [
        b"\x5a",
        b"\x01\x02",
        b"\x01\x02\x03\x04",
        b"\xab" * 8,
        b"\x01\x02\x03\x04\x01\x02\x03\x04",
        b"\x01\x02\x03",
        bytes(range(8)),
    ],
)
def test_memfill_native_or_fallback(fake_runtime, pattern):
    d0, _ = fake_runtime
    a = d0.alloc(48)
    n = 48 // len(pattern) * len(pattern)
    pyoffload.memfill(a, pattern, n)
    out = np.zeros(48, np.uint8)
    pyoffload.memcpy(out, a)
    assert out[:n].tobytes() == pattern * (n // len(pattern))
    a.free()


def test_fill_hook_refuses_what_memset_cannot_do(fake_runtime):
    from pyoffload_cuda import plugin

    d0, _ = fake_runtime
    a = d0.alloc(64)
    with d0.create_queue() as q:
        with pytest.raises(pyoffload.UnsupportedError):
            plugin.data_fill_impl(d0.handle, q.handle, a.ptr, b"\x01\x02\x03", 63)
        with pytest.raises(pyoffload.UnsupportedError):
            plugin.data_fill_impl(d0.handle, q.handle, a.ptr + 2, b"\x01\x02\x03\x04", 8)  # misaligned d32
    a.free()


def test_packer_lays_out_parameters_and_local_memory(fake_runtime):
    from pyoffload_cuda import plugin

    d0, _ = fake_runtime
    with d0.load_program(images(d0)["kernels"]) as prog:
        kernel = prog.kernel("noop").handle
        pack = plugin.kernel_packer_impl(d0.handle, kernel, ("ptr", "local", "f32", "local", "i8", "f16", "u64"))
        size, (buf,), shared = pack(
            (5, LocalMemory(10), np.float32(1), LocalMemory(4), np.int8(-2), np.float16(1.5), np.uint64(7))
        )
    # natural alignment: ptr@0 local@8 f32@16 local@24 i8@32 f16@34 u64@40
    assert size == len(buf) == 48 and shared == 20
    assert struct.unpack("<QQf4xQbxexxxxQ", buf) == (5, 0, 1.0, 16, -2, 1.5, 7)


def test_lock_gives_the_host_address(fake_runtime, driver):
    d0, _ = fake_runtime
    buf = np.zeros(1024, np.uint8)
    p = d0.lock(buf)
    assert p == buf.ctypes.data  # unified addressing
    assert any(r.kind == "registered" for r in driver.memory.live())
    d0.unlock(buf)
    assert not any(r.kind == "registered" for r in driver.memory.live())


def test_native_handles_and_borrowed_streams(fake_runtime, driver):
    d0, _ = fake_runtime
    with d0.create_queue() as q:
        assert q.native == q.handle.stream.handle and isinstance(q.native, int)
    d0.handle.context().push()
    try:
        stream = driver.Stream()
    finally:
        driver.Context.pop()
    borrowed = pyoffload.Queue.from_native(stream, d0)
    a = d0.alloc(16)
    borrowed.memfill(a, b"\x07").wait()
    borrowed.destroy()
    assert stream._ctx.alive and stream in stream._ctx.objects  # not ours to destroy
    with pytest.raises(pyoffload.UnsupportedError):
        pyoffload.Queue.from_native(12345, d0)
    a.free()
    d0.handle.context().push()
    del stream
    driver.Context.pop()


def test_all_kinds_round_trip_and_shutdown_leaves_nothing(fake_runtime, driver):
    d0, d1 = fake_runtime
    for kind in AllocKind:
        a = d1.alloc(256, kind)
        pyoffload.memcpy(a, np.arange(64, dtype=np.int32))
        out = np.zeros(64, np.int32)
        pyoffload.memcpy(out, a)
        assert list(out) == list(range(64))
    q = d1.create_queue()  # left alive on purpose: shutdown must release it
    d1.load_program(images(d1)["ctor_dtor"])
    pyoffload.shutdown()
    assert driver.leaks == []
    assert driver.memory.live() == []
    del q


def test_driver_calls_exercised(fake_runtime, driver):
    """A small workload reaches the driver entry points the plugin is built on."""
    d0, d1 = fake_runtime
    ctx = pyoffload.Context([d0, d1])
    a, b = ctx.alloc(256, device=d0), ctx.alloc(256, device=d1)
    with (
        d0.load_program(images(d0)["kernels"], context=ctx) as prog,
        d0.create_queue(profiling=True, context=ctx) as q,
        d1.create_queue(context=ctx) as q1,
    ):
        e1 = q.launch(prog.kernel("iota_i32"), 1, 64, [a, np.int32(64), np.int32(0)])
        q.memfill(a, b"\x01\x02\x03\x04")
        e2 = q.launch(prog.kernel("noop"), 1, 1, [])
        q1.wait_events(e2)
        q1.memcpy(b, a).wait()
        assert e2.elapsed_ms(e1) >= 0
    pyoffload.memcpy(a, np.arange(64, dtype=np.int32))
    out = np.zeros(64, np.int32)
    pyoffload.memcpy(out, a)
    assert list(out) == list(range(64))
    ctx.close()
    expected = {
        "cuInit",
        "cuDevicePrimaryCtxRetain",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuCtxEnablePeerAccess",
        "cuMemAlloc",
        "cuMemFree",
        "cuModuleLoadDataEx",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        "cuStreamCreate",
        "cuStreamWaitEvent",
        "cuEventCreate",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuEventElapsedTime",
        "cuMemsetD32Async",
        "cuStreamSynchronize",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
    }
    assert expected <= driver.calls, expected - driver.calls


def test_signatures_are_checked_before_the_driver(fake_runtime, driver, built):
    d0, _ = fake_runtime
    out = d0.alloc(8)
    with d0.load_program(built["cubin"]["kernels"]) as prog, d0.create_queue() as q:
        launches = len(driver.launches)
        with pytest.raises(OffloadError) as err:
            q.launch(prog.kernel("sleep_spin"), 1, 1, [out, np.int32(5)])  # takes an int64
        assert err.value.errc is Errc.INVALID_ARGUMENT
        assert len(driver.launches) == launches
        q.launch(prog.kernel("sleep_spin"), 1, 1, [out, 5]).wait()  # converted to the declared int64
    assert np.frombuffer(_read(out), np.int64)[0] == 5
    assert driver.violations == []
    out.free()


def _read(alloc):
    buf = bytearray(alloc.size)
    pyoffload.memcpy(buf, alloc)
    return bytes(buf)


# -- behaviours of the real pycuda on a GPU that the fake models ----------------------------


def test_lock_pins_memory_whose_array_has_a_base(fake_runtime, driver):
    """pycuda's register_host_memory refuses arrays with a base (SystemError from numpy), and
    every wrapper of foreign memory has one: the plugin pins the raw range instead."""
    d0, _ = fake_runtime
    buf = np.zeros(4096, np.uint8)
    view = np.ctypeslib.as_array((ctypes.c_ubyte * 1024).from_address(buf.ctypes.data + 1024))
    assert view.base is not None
    assert d0.lock(view) == view.ctypes.data
    assert [r.kind for r in driver.memory.live() if r.base == view.ctypes.data] == ["registered"]
    d0.unlock(view)
    assert driver.memory.find_live(view.ctypes.data) is None
    assert driver.violations == []


def test_releases_on_threads_where_the_context_is_not_current(fake_runtime, monkeypatch):
    """pycuda releases an object only where its context is current or on the thread that made
    the context; elsewhere it refuses and leaks.  Frees, unpinning and event releases happen on
    any thread."""
    from pyoffload_cuda import plugin

    pyoffload.shutdown()
    monkeypatch.setenv("PYOFFLOAD_POOL_THRESHOLD", "0")  # every free reaches the driver at once
    d0 = next(d for d in pyoffload.devices() if d.backend == "cuda")
    driver = plugin._devices[0].cuda
    allocs = [d0.alloc(64, kind) for kind in AllocKind]
    buf = np.zeros(256, np.uint8)
    d0.lock(buf)
    q = d0.create_queue(profiling=True)
    events = [q.record() for _ in range(3)]
    q.wait()

    def elsewhere() -> None:
        for a in allocs:
            a.free()
        d0.unlock(buf)
        events.clear()  # the generic layer releases their driver events here
        gc.collect()

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    q.destroy()
    pyoffload.shutdown()
    assert [v for v in driver.violations if v[0] == "out-of-thread"] == []
    assert driver.leaks == []


def test_a_prepared_launch_does_not_keep_its_stream(fake_runtime, driver):
    """A prepared launch outliving its queue must not hold the pycuda Stream: it would be
    destroyed wherever the prepared launch is collected, where pycuda cannot."""
    d0, _ = fake_runtime
    with d0.load_program(images(d0)["kernels"]) as prog:
        q = d0.create_queue()
        prepared = [q.prepare(prog.kernel("noop"), 1, 1, [])]
        prepared[0]()
        q.destroy()
        worker = threading.Thread(target=lambda: (prepared.clear(), gc.collect()))
        worker.start()
        worker.join()
    assert driver.violations == []


def test_queries_answer_not_ready_while_work_runs(fake_runtime):
    d0, _ = fake_runtime
    out = d0.alloc(8)
    with d0.load_program(images(d0)["kernels"]) as prog, d0.create_queue(profiling=True) as q:
        start = q.record()
        q.launch(prog.kernel("sleep_spin"), 1, 1, [out, np.int64(20_000_000)])  # 20 ms on the fake
        end = q.record()
        assert not end.is_complete and not q.query()
        end.wait()
        assert end.is_complete and q.query()
        assert end.elapsed_ms(start) >= 19.0
    out.free()


def test_rect_copies_and_fills_use_the_driver_calls(fake_runtime, driver):
    """A 2D/3D copy between host and one device is one cuMemcpy2DAsync / cuMemcpy3DAsync, a 2D
    fill one cuMemsetD2D*Async; the results are checked byte by byte."""
    import pyoffload

    dev = fake_runtime[0]
    a = dev.alloc(1024)
    pyoffload.memfill(a, b"\0")
    src = np.arange(8 * 40, dtype=np.uint32).astype(np.uint8)
    pyoffload.memcpy_2d(a, 48, src, 40, 33, 8)
    assert "cuMemcpy2DAsync" in driver.calls
    q = dev.create_queue()
    q.memfill_2d(a.ptr + 4, 48, np.uint32(0x01020304), 8, 8).wait()
    assert "cuMemsetD2D32Async" in driver.calls
    box = np.zeros((2, 4, 33), np.uint8)
    q.memcpy_3d(box, a, (33, 4, 2), dst_pitch=33, dst_slice_pitch=132, src_pitch=48, src_slice_pitch=192).wait()
    assert "cuMemcpy3DAsync" in driver.calls
    expected = np.zeros((8, 48), np.uint8)
    expected[:, :33] = src.reshape(8, 40)[:, :33]
    expected[:, 4:12] = np.frombuffer(np.uint32(0x01020304).tobytes() * 2, np.uint8)
    assert np.array_equal(box.reshape(8, 33), expected[:, :33])
    q.destroy()
    a.free()
