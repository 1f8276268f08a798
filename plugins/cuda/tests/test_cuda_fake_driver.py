"""The fake pycuda.driver catches what a GPU driver would refuse, and what it would corrupt."""

from __future__ import annotations

import numpy as np
import pytest

from pyoffload_cuda.fake import FakeDriver, FakeDriverWarning


@pytest.fixture
def drv():
    d = FakeDriver(devices=2, arch="sm_80", memory=1 << 20)
    d.init()
    return d


@pytest.fixture
def ctxs(drv):
    c0 = drv.Device(0).retain_primary_context()
    c1 = drv.Device(1).retain_primary_context()
    yield c0, c1


def kinds(drv):
    return [k for k, _ in drv.violations]


def test_needs_init():
    d = FakeDriver()
    with pytest.raises(d.LogicError, match="initialization error"):
        d.Device.count()
    none = FakeDriver(devices=0)
    with pytest.raises(none.RuntimeError, match="no CUDA-capable device"):
        none.init()


def test_needs_a_current_context(drv, ctxs):
    with pytest.raises(drv.LogicError, match="invalid device context"):
        drv.mem_alloc(16)
    assert kinds(drv) == ["no-context"]
    ctxs[0].push()
    assert int(drv.mem_alloc(16)) > 0
    drv.Context.pop()
    with pytest.raises(drv.LogicError):
        drv.Context.pop()


def test_copies_round_trip_and_use_after_free(drv, ctxs):
    ctxs[0].push()
    a = drv.mem_alloc(64)
    drv.memcpy_htod(int(a), np.arange(16, dtype=np.int32))
    out = np.zeros(16, np.int32)
    drv.memcpy_dtoh(out, int(a) + 0)
    assert list(out) == list(range(16))
    a.free()
    with pytest.raises(drv.LogicError, match="which was freed"):
        drv.memcpy_dtoh(out, int(a) + 8)
    with pytest.raises(drv.LogicError, match="invalid resource handle"):
        a.free()
    assert kinds(drv) == ["use-after-free", "double-free"]
    drv.Context.pop()


def test_out_of_bounds_and_unknown_pointers(drv, ctxs):
    ctxs[0].push()
    a = drv.mem_alloc(64)
    with pytest.raises(drv.LogicError, match="runs past the end"):
        drv.memcpy_htod(int(a) + 32, bytes(64))
    with pytest.raises(drv.LogicError, match="not in any allocation"):
        drv.memset_d8(12345678, 0, 4)
    assert kinds(drv) == ["out-of-bounds", "unknown-pointer"]
    a.free()
    drv.Context.pop()


def test_device_addresses_are_not_host_memory(drv, ctxs):
    from pyoffload_cuda.fake.memory import address_space

    ctxs[0].push()
    a = drv.mem_alloc(64)
    assert address_space().contains(int(a))
    host = np.zeros(64, np.uint8)
    assert not address_space().contains(host.ctypes.data)
    import ctypes

    assert drv.libcuda.cuMemHostRegister_v2(ctypes.c_void_p(int(a)), ctypes.c_size_t(64), ctypes.c_uint(3)) != 0
    assert kinds(drv) == ["bad-argument"]
    a.free()
    drv.Context.pop()


def test_wrong_context_for_kernel_and_stream(drv, ctxs, built):
    c0, c1 = ctxs
    c0.push()
    module = drv.module_from_buffer(built["ptx"]["kernels"])
    noop = module.get_function("_Z4noopv").prepare([])
    stream0 = drv.Stream()
    drv.Context.pop()
    c1.push()
    with pytest.raises(drv.LogicError, match="invalid resource handle"):
        noop.prepared_async_call((1, 1), (1, 1, 1), None)
    with pytest.raises(drv.LogicError, match="invalid resource handle"):
        drv.Event().record(stream0)
    assert kinds(drv) == ["wrong-context", "wrong-context"]
    drv.Context.pop()


def test_kernel_access_to_another_device_needs_peer_access(drv, ctxs, built):
    c0, c1 = ctxs
    c1.push()
    on_dev1 = drv.mem_alloc(64)
    drv.Context.pop()
    c0.push()
    iota = drv.module_from_buffer(built["ptx"]["kernels"]).get_function("_Z8iota_i32Piii").prepare("Qii")
    drv.Context.enable_peer_access(c1)
    iota.prepared_async_call((1, 1), (16, 1, 1), None, int(on_dev1), 16, 0)
    drv.Context.synchronize()
    drv.Context.disable_peer_access(c1)
    iota.prepared_async_call((1, 1), (16, 1, 1), None, int(on_dev1), 16, 0)
    with pytest.raises(drv.LogicError, match="illegal memory access"):
        drv.Context.synchronize()
    # The error is sticky: the context is lost, as on a GPU.
    with pytest.raises(drv.LogicError, match="illegal memory access"):
        drv.mem_alloc(16)
    assert "wrong-context" in kinds(drv) and "illegal-address" in kinds(drv)
    drv.Context.pop()


def test_stream_work_runs_only_when_synchronised(drv, ctxs):
    ctxs[0].push()
    a = drv.mem_alloc(16)
    s = drv.Stream()
    drv.memset_d32_async(int(a), 7, 4, s)
    peek = np.zeros(4, np.int32)
    drv.memcpy_dtoh_async(peek, int(a), s)
    assert list(peek) == [0, 0, 0, 0], "asynchronous work completed without synchronisation"
    s.synchronize()
    assert list(peek) == [7, 7, 7, 7]
    a.free()
    drv.Context.pop()


def test_events_time_and_order(drv, ctxs):
    ctxs[0].push()
    s = drv.Stream()
    e1, e2 = drv.Event(), drv.Event()
    e1.record(s)
    e2.record(s)
    with pytest.raises(drv.LogicError, match="not ready"):
        e1.time_till(e2)
    e2.synchronize()
    assert e1.time_till(e2) >= 0.0
    untimed = drv.Event(drv.event_flags.DISABLE_TIMING).record(s).synchronize()
    with pytest.raises(drv.LogicError):
        e1.time_till(untimed)
    drv.Context.pop()


def test_modules_know_only_the_image_symbols(drv, ctxs, built):
    ctxs[0].push()
    for fmt in ("ptx", "cubin", "fatbin"):
        module = drv.module_from_buffer(built[fmt]["kernels"])
        assert module.get_function("_Z8iota_i32Piii").plain_name == "iota_i32"
        with pytest.raises(drv.LogicError, match="named symbol not found"):
            module.get_function("no_such_kernel")
        with pytest.raises(drv.LogicError, match="named symbol not found"):
            module.get_global("no_such_global")
        addr, size = module.get_global("table")
        out = np.zeros(16, np.int32)
        drv.memcpy_dtoh(out, addr)
        assert size == 64 and list(out) == list(range(16))
    drv.Context.pop()


def test_module_loading_checks_the_device(built, nvcc):
    from pyoffload_cuda import nvcc as conformance

    old = FakeDriver(devices=1, arch="sm_75")
    old.init()
    old.Device(0).retain_primary_context().push()
    with pytest.raises(old.RuntimeError, match="no kernel image"):
        old.module_from_buffer(built["cubin"]["kernels"])
    logs = []
    with pytest.raises(old.LogicError, match="PTX JIT"):
        old.module_from_buffer(built["ptx"]["kernels"], [], lambda ok, info, err: logs.append((ok, err)))
    assert logs and logs[0][0] is False and "sm_80" in logs[0][1]
    assert old.module_from_buffer(conformance.build("kernels", "ptx", 75, nvcc)).get_function("_Z4noopv")
    with pytest.raises(old.LogicError, match="image is invalid"):
        old.module_from_buffer(b"garbage" * 10)
    old.Context.pop()


def test_leaks_are_reported_when_the_context_is_released(drv, ctxs, built):
    c0, c1 = ctxs
    c0.push()
    kept = drv.mem_alloc(256)
    pinned = drv.pagelocked_empty(64, np.uint8, "C", 3)
    module = drv.module_from_buffer(built["ptx"]["kernels"])
    drv.Context.pop()
    with pytest.warns(FakeDriverWarning) as record:
        c0.detach()
    text = "\n".join(drv.leaks)
    assert "device allocation" in text and "host allocation" in text and "Module" in text
    assert len(record) == len(drv.leaks) == 3
    del kept, pinned, module
    c1.detach()
    assert len(drv.leaks) == 3  # nothing of device 1 leaked


def test_nothing_leaks_after_clean_release(drv, ctxs):
    c0, c1 = ctxs
    c0.push()
    a = drv.mem_alloc(256)
    h = drv.pagelocked_empty(64, np.uint8, "C", 3)
    reg = drv.register_host_memory(np.zeros(128, np.uint8), 3)
    a.free()
    h.base.free()
    reg.base.unregister()
    drv.Context.pop()
    c0.detach()
    c1.detach()
    assert drv.leaks == []
    with pytest.raises(drv.LogicError, match="was released"):
        c0.push()


def test_registering_twice_is_refused(drv, ctxs):
    import ctypes

    ctxs[0].push()
    buf = np.zeros(4096, np.uint8)
    reg = drv.register_host_memory(buf, 3)
    assert reg.base.get_device_pointer() == buf.ctypes.data
    inner = (ctypes.c_void_p(buf.ctypes.data + 100), ctypes.c_size_t(100), ctypes.c_uint(3))
    assert drv.libcuda.cuMemHostRegister_v2(*inner) == 712  # already mapped
    reg.base.unregister()
    assert drv.libcuda.cuMemHostRegister_v2(*inner) == 0
    assert drv.libcuda.cuMemHostUnregister(inner[0]) == 0
    drv.Context.pop()


def test_out_of_memory(drv, ctxs):
    ctxs[0].push()
    with pytest.raises(drv.MemoryError, match="out of memory"):
        drv.mem_alloc(2 << 20)
    drv.Context.pop()


def test_launch_argument_layout_is_checked(drv, ctxs, built):
    ctxs[0].push()
    function = drv.module_from_buffer(built["ptx"]["kernels"]).get_function("_Z8iota_i32Piii")
    out = drv.mem_alloc(64)
    with pytest.raises(drv.LogicError, match="parameters"):  # 20 bytes for a 16-byte parameter list
        function.prepare("Qqi").prepared_async_call((1, 1), (16, 1, 1), None, int(out), 16, 0)
    with pytest.raises(drv.LogicError, match="invalid argument"):
        function.prepare("Qii").prepared_async_call((1, 1), (2048, 1, 1), None, int(out), 16, 0)
    assert kinds(drv) == ["argument-size", "bad-dimensions"]
    out.free()
    drv.Context.pop()


def test_unknown_kernels_are_recorded(drv, ctxs):
    ptx = b".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry mystery(\n.param .u32 p0\n)\n{\nret;\n}\n"
    ctxs[0].push()
    fn = drv.module_from_buffer(ptx).get_function("mystery").prepare("I")
    fn.prepared_async_call((2, 1), (4, 1, 1), None, 5)
    drv.Context.synchronize()
    assert drv.launches[-1][:3] == ("mystery", (2, 1, 1), (4, 1, 1))
    drv.Context.pop()


def test_the_fake_reads_parameter_layouts_and_initial_values(built):
    from pyoffload_cuda.fake.images import read_cubin, read_ptx

    ptx, cubin = read_ptx(built["ptx"]["kernels"]), read_cubin(built["cubin"]["kernels"])
    assert ptx.kernels["_Z8iota_i32Piii"] == (8, 4, 4)
    assert ptx.kernels["_Z7scalarsPdasilfdhtjm"] == (8, 1, 2, 4, 8, 4, 8, 1, 2, 4, 8)
    assert cubin.kernels == ptx.kernels  # EIATTR_KPARAM_INFO agrees with the PTX declarations
    for image in (ptx, cubin):
        assert np.frombuffer(image.globals["table"], np.int32).tolist() == list(range(16))
    pi = read_ptx(b".version 8.0\n.target sm_75\n.address_size 64\n.global .align 4 .f32 pi = 0f40490FDB;\n")
    assert np.frombuffer(pi.globals["pi"], np.float32)[0] == pytest.approx(3.14159265)


def test_register_host_memory_refuses_arrays_with_a_base(drv, ctxs):
    ctxs[0].push()
    buf = np.zeros(4096, np.uint8)
    with pytest.raises(SystemError, match="'base' dependency more than once"):
        drv.register_host_memory(buf[:1024], 3)  # a slice has its array as base
    assert kinds(drv) == ["array-base"] and drv.memory.find_live(buf.ctypes.data) is None
    drv.Context.pop()


def test_raw_registration_through_the_driver_library(drv, ctxs):
    import ctypes

    lib = drv.libcuda
    buf = np.zeros(4096, np.uint8)
    p, n = ctypes.c_void_p(buf.ctypes.data), ctypes.c_size_t(4096)
    assert lib.cuMemHostRegister_v2(p, n, ctypes.c_uint(3)) == 201  # no current context
    ctxs[0].push()
    assert lib.cuMemHostRegister_v2(p, n, ctypes.c_uint(3)) == 0
    assert lib.cuMemHostRegister_v2(ctypes.c_void_p(buf.ctypes.data + 64), ctypes.c_size_t(64), 3) == 712
    mapped = ctypes.c_uint64()
    assert lib.cuMemHostGetDevicePointer_v2(ctypes.byref(mapped), p, 0) == 0 and mapped.value == buf.ctypes.data
    assert lib.cuMemHostUnregister(p) == 0
    assert lib.cuMemHostUnregister(p) == 713
    drv.Context.pop()


def test_releases_need_the_context_current_or_its_own_thread(drv, ctxs):
    import threading

    c0 = ctxs[0]
    c0.push()
    a, b = drv.mem_alloc(64), drv.mem_alloc(64)
    events = [drv.Event(), drv.Event()]
    drv.Context.pop()
    errors = []

    def elsewhere() -> None:
        try:
            a.free()
        except drv.LogicError as exc:
            errors.append(str(exc))
        events.pop()  # collected here, with no context current: pycuda cannot destroy it
        c0.push()  # with the context current, releases work on any thread
        b.free()
        events.pop()
        drv.Context.pop()

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert len(errors) == 1 and "cannot activate out-of-thread context" in errors[0]
    assert kinds(drv) == ["out-of-thread", "out-of-thread"]
    assert drv.memory.find_live(int(a)) is not None and drv.memory.find_live(int(b)) is None
    a.free()  # on the thread that retained the context: fine


def test_queries_are_not_ready_until_work_is_due(drv, ctxs, built):
    ctxs[0].push()
    out = drv.mem_alloc(8)
    spin = drv.module_from_buffer(built["ptx"]["kernels"]).get_function("_Z10sleep_spinPll").prepare("Qq")
    s = drv.Stream()
    start, end = drv.Event(), drv.Event()
    start.record(s)
    spin.prepared_async_call((1, 1), (1, 1, 1), s, int(out), 10_000_000)  # 10 ms
    end.record(s)
    assert not end.query() and not s.is_done()
    end.synchronize()
    assert end.query() and s.is_done()
    assert start.time_till(end) >= 10.0
    out.free()
    drv.Context.pop()


def test_the_pytest_plugin_fails_a_run_that_leaks(tmp_path):
    """With PYOFFLOAD_CUDA_DRIVER=fake, a session whose tests all pass still fails when the fake
    driver saw a violation or a leak."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_leak.py").write_text(
        "import pyoffload\n"
        "def test_leaks_pinned_memory():\n"
        "    from pyoffload_cuda import plugin\n"
        "    dev = [d for d in pyoffload.devices() if d.backend == 'cuda'][0]\n"
        "    dev.handle.context().push()\n"
        "    globals()['kept'] = plugin._devices[0].cuda.mem_alloc(64)\n"
        "    plugin._devices[0].cuda.Context.pop()\n"
    )
    env = dict(os.environ, PYOFFLOAD_CUDA_DRIVER="fake", PYOFFLOAD_PLUGINS="cuda")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert "1 passed" in proc.stdout and proc.returncode == 1, proc.stdout + proc.stderr
    assert "fake CUDA driver" in proc.stdout and "leak:" in proc.stdout


def test_2d_and_3d_copies_and_their_documented_errors(drv, ctxs):
    """cuMemcpy2DAsync / cuMemcpy3DAsync as pycuda's Memcpy2D / Memcpy3D call them: rows land at
    their pitches; a row past its pitch, rows past a slice, a pitch above
    CU_DEVICE_ATTRIBUTE_MAX_PITCH and memory that is not there are CUDA_ERROR_INVALID_VALUE."""
    ctxs[0].push()
    stream = drv.Stream()
    a = drv.mem_alloc(256)
    drv.memset_d8(int(a), 0, 256)
    src = np.arange(64, dtype=np.uint8)  # 4 rows of 16 bytes
    c = drv.Memcpy2D()
    c.set_src_host(src)
    c.set_dst_device(int(a))
    c.src_pitch, c.dst_pitch, c.width_in_bytes, c.height = 16, 32, 10, 4
    c(stream)
    stream.synchronize()
    out = np.zeros(256, np.uint8)
    drv.memcpy_dtoh(out, int(a))
    expected = np.zeros(256, np.uint8)
    for y in range(4):
        expected[y * 32 : y * 32 + 10] = src[y * 16 : y * 16 + 10]
    assert np.array_equal(out, expected)
    c.dst_x_in_bytes = 23  # 23 + 10 > 32
    with pytest.raises(drv.LogicError, match="invalid argument"):
        c(stream)
    c.dst_x_in_bytes, c.dst_pitch = 0, 2**31
    with pytest.raises(drv.LogicError, match="invalid argument"):
        c(stream)
    c.dst_pitch, c.height = 32, 9  # 8 * 32 + 10 bytes > 256
    with pytest.raises(drv.LogicError, match="invalid argument"):
        c(stream)
    box = drv.Memcpy3D()  # device to host: 2 slices of 2 rows
    box.set_src_device(int(a))
    back = np.zeros(2 * 2 * 8, np.uint8)
    box.set_dst_host(back)
    box.src_pitch, box.src_height, box.dst_pitch, box.dst_height = 32, 2, 8, 2
    box.width_in_bytes, box.height, box.depth = 8, 2, 2
    box(stream)
    stream.synchronize()
    assert np.array_equal(back.reshape(4, 8), expected.reshape(8, 32)[:4, :8])
    box.height = 3  # 3 rows in slices of 2
    with pytest.raises(drv.LogicError, match="invalid argument"):
        box(stream)
    assert {"cuMemcpy2DAsync", "cuMemcpy3DAsync"} <= drv.calls
    a.free()
    del stream
    drv.Context.pop()


def test_2d_memset_and_its_documented_errors(drv, ctxs):
    ctxs[0].push()
    stream = drv.Stream()
    a = drv.mem_alloc(128)
    drv.memset_d8(int(a), 0, 128)
    drv.memset_d2d16_async(int(a) + 2, 32, 0xBEEF, 3, 4, stream)  # 4 rows of 3 elements
    stream.synchronize()
    out = np.zeros(128, np.uint8)
    drv.memcpy_dtoh(out, int(a))
    for y in range(4):
        assert out[2 + y * 32 : 2 + y * 32 + 6].tobytes() == np.uint16(0xBEEF).tobytes() * 3
        assert not out[8 + y * 32 : 32 + y * 32].any()
    with pytest.raises(drv.LogicError, match="invalid argument"):
        drv.memset_d2d32_async(int(a) + 2, 32, 1, 2, 2, stream)  # misaligned address
    with pytest.raises(drv.LogicError, match="invalid argument"):
        drv.memset_d2d8_async(int(a), 4, 1, 8, 2, stream)  # pitch below the row
    with pytest.raises(drv.LogicError, match="invalid argument"):
        drv.memset_d2d8_async(int(a), 64, 1, 8, 3, stream)  # 2 * 64 + 8 > 128
    a.free()
    del stream
    drv.Context.pop()
