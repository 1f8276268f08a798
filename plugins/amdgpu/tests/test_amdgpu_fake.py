"""The fake HIP driver: hip-python's conventions, a recorded address space, real module symbols,
emulated conformance kernels, and detection of use-after-free, wrong-device use and leaks."""

from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import pytest
from amdgpu_test_support import build, conformance_images

from pyoffload.conformance.test_builds import CALLEE, CALLER

from pyoffload_amdgpu import codeobject, conformance
from pyoffload_amdgpu.fake_hip import FakeHip, FakeHipWarning, FakePointer
from pyoffload_amdgpu.fake_hip.kernels import EMULATIONS
from pyoffload_amdgpu.kernargs import packer

E = FakeHip.hipError_t
H2D, D2H = FakeHip.hipMemcpyKind.hipMemcpyHostToDevice, FakeHip.hipMemcpyKind.hipMemcpyDeviceToHost


@pytest.fixture
def hip():
    fake = FakeHip(device_count=2)
    yield fake
    for stream in fake._streams:
        if not stream.destroyed:
            stream.stop()


def ok(result):
    assert result[0] == E.hipSuccess, result
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def load(hip, image):
    return ok(hip.hipModuleLoadData(image))


def launch(hip, module, name, args, grid=(1, 1, 1), block=(1, 1, 1), stream=None):
    function = ok(hip.hipModuleGetFunction(module, name))
    kinds = tuple("ptr" if isinstance(a, int) else f"{a.dtype.kind}{8 * a.dtype.itemsize}" for a in args)
    frame, shared = packer(function.info, kinds)(args)
    return hip.hipModuleLaunchKernel(function, *grid, *block, shared, stream, None, ctypes.addressof(frame))


def test_results_are_tuples_and_pointers_only_convert_to_int(hip):
    assert hip.hipInit(0) == (E.hipSuccess,)
    err, ptr = hip.hipMalloc(64)
    assert err == E.hipSuccess and isinstance(ptr, FakePointer)
    with pytest.raises(TypeError):
        ptr + 1  # hip-python's Pointer has no arithmetic either
    assert int(ptr) >= 1 << 48
    assert hip.hipFree(ptr) == (E.hipSuccess,)


def test_copies_round_trip_through_device_memory(hip):
    ptr = ok(hip.hipMalloc(16))
    ok(hip.hipMemcpy(ptr, memoryview(b"0123456789abcdef"), 16, H2D))
    out = bytearray(16)
    ok(hip.hipMemcpy(memoryview(out), ptr, 16, D2H))
    assert out == b"0123456789abcdef"
    ok(hip.hipMemsetD16(int(ptr) + 2, 0x4142, 3))
    ok(hip.hipMemcpy(memoryview(out), ptr, 16, D2H))
    assert out == b"01BABABA89abcdef"
    ok(hip.hipFree(ptr))
    assert hip.violations == []


def test_use_after_free_and_double_free_are_violations(hip):
    ptr = ok(hip.hipMalloc(32))
    ok(hip.hipFree(ptr))
    assert hip.hipMemcpy(memoryview(bytearray(4)), ptr, 4, D2H) == (E.hipErrorInvalidValue,)
    assert hip.hipFree(ptr) == (E.hipErrorInvalidValue,)
    assert any("use after free" in v for v in hip.violations)
    assert any("double free" in v for v in hip.violations)


def test_overrun_and_wrong_free_function_are_violations(hip):
    ptr = ok(hip.hipMalloc(8))
    assert hip.hipMemcpy(ptr, memoryview(bytes(16)), 16, H2D) == (E.hipErrorInvalidValue,)
    assert hip.hipHostFree(ptr) == (E.hipErrorInvalidValue,)
    assert any("overrun" in v for v in hip.violations)
    assert any("is device memory" in v for v in hip.violations)
    ok(hip.hipFree(ptr))


def test_allocations_follow_the_current_device(hip):
    ok(hip.hipSetDevice(1))
    ptr = ok(hip.hipMalloc(8))
    assert hip.space.find(int(ptr)).device == 1
    assert hip.hipSetDevice(2) == (E.hipErrorInvalidDevice,)
    ok(hip.hipFree(ptr))


def test_out_of_memory_is_an_error_not_a_violation():
    hip = FakeHip(device_count=1, memory_per_device=1 << 20)
    assert hip.hipMalloc(2 << 20)[0] == E.hipErrorOutOfMemory
    assert hip.violations == []


def test_modules_expose_only_what_the_image_has(hip):
    module = load(hip, conformance_images()["kernels"])
    assert hip.hipModuleGetFunction(module, "iota_i32")[0] == E.hipSuccess
    assert hip.hipModuleGetFunction(module, "counter")[0] == E.hipErrorNotFound  # a global, not a kernel
    assert hip.hipModuleGetFunction(module, "missing")[0] == E.hipErrorNotFound
    assert hip.hipModuleGetGlobal(module, "missing")[0] == E.hipErrorNotFound
    address, size = ok(hip.hipModuleGetGlobal(module, "table"))
    out = bytearray(size)
    ok(hip.hipMemcpy(memoryview(out), address, size, D2H))
    assert size == 64 and np.array_equal(np.frombuffer(out, np.int32), np.arange(16))
    ok(hip.hipModuleUnload(module))
    assert hip.hipMemcpy(memoryview(out), address, 4, D2H)[0] == E.hipErrorInvalidValue  # globals died with it
    assert hip.hipModuleGetFunction(module, "noop")[0] == E.hipErrorInvalidHandle


def test_images_it_cannot_run_are_refused(hip):
    assert hip.hipModuleLoadData(b"not an image")[0] == E.hipErrorInvalidImage
    other = build("kernel void k(global int *p) { p[0] = 1; }", "gfx1030")
    assert hip.hipModuleLoadData(other)[0] == E.hipErrorNoBinaryForGpu
    assert hip.violations == []


def test_emulated_kernels_compute_what_the_sources_say(hip):
    module = load(hip, conformance_images()["kernels"])
    out = ok(hip.hipMalloc(4 * 100))
    ok(launch(hip, module, "iota_i32", (int(out), np.int32(70), np.int32(3)), grid=(3, 1, 1), block=(32, 1, 1)))
    result = bytearray(400)
    ok(hip.hipMemcpy(memoryview(result), out, 400, D2H))
    values = np.frombuffer(result, np.int32)
    assert np.array_equal(values[:70], np.arange(3, 73)) and not values[70:].any()  # ids >= n untouched
    ok(launch(hip, module, "bump", (int(out),)))
    ok(launch(hip, module, "bump", (int(out),)))
    ok(hip.hipMemcpy(memoryview(result), out, 4, D2H))
    assert struct.unpack_from("<i", result)[0] == 2
    ok(hip.hipStreamSynchronize(None))
    ok(hip.hipFree(out))
    ok(hip.hipModuleUnload(module))
    assert hip.violations == [] and hip.unknown_launches == []


def test_kernel_reaching_another_devices_memory_needs_peer_access(hip):
    ok(hip.hipSetDevice(1))
    remote = ok(hip.hipMalloc(4))
    ok(hip.hipSetDevice(0))
    module = load(hip, conformance_images()["kernels"])
    ok(launch(hip, module, "bump", (int(remote),)))  # the fault is asynchronous, as on a GPU
    assert hip.hipStreamSynchronize(None) == (E.hipErrorIllegalAddress,)
    assert any("without peer access" in v for v in hip.violations)
    hip.violations.clear()
    ok(hip.hipDeviceEnablePeerAccess(1, 0))
    assert hip.hipDeviceEnablePeerAccess(1, 0) == (E.hipErrorPeerAccessAlreadyEnabled,)
    ok(launch(hip, module, "bump", (int(remote),)))
    ok(hip.hipStreamSynchronize(None))
    assert hip.violations == []
    ok(hip.hipFree(remote))
    ok(hip.hipModuleUnload(module))


def test_launch_on_another_devices_stream_is_refused(hip):
    module = load(hip, conformance_images()["kernels"])
    ok(hip.hipSetDevice(1))
    stream = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    assert launch(hip, module, "noop", (), stream=stream) == (E.hipErrorInvalidDeviceFunction,)
    assert any("module is on device 0" in v for v in hip.violations)
    ok(hip.hipStreamDestroy(stream))
    assert hip.hipStreamSynchronize(stream) == (E.hipErrorInvalidHandle,)


def test_short_kernarg_buffer_is_refused(hip):
    module = load(hip, conformance_images()["kernels"])
    function = ok(hip.hipModuleGetFunction(module, "iota_i32"))
    buffer = ctypes.create_string_buffer(8)
    size = ctypes.c_size_t(8)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 3)
    result = hip.hipModuleLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, None, ctypes.addressof(extra))
    assert result == (E.hipErrorInvalidValue,)
    assert any("need 16" in v for v in hip.violations)


def test_block_larger_than_the_kernel_allows_is_an_error(hip):
    module = load(hip, conformance_images()["ctor_dtor"])  # plain kernels: at most 256 work-items
    out = ok(hip.hipMalloc(8))
    assert launch(hip, module, "get_state", (int(out),), block=(512, 1, 1)) == (E.hipErrorInvalidValue,)
    ok(hip.hipFree(out))


def test_unknown_kernels_are_recorded(hip):
    module = load(hip, build("kernel void mystery(global int *p) { p[0] = 9; }"))
    ok(launch(hip, module, "mystery", (0,)))
    assert hip.unknown_launches == ["mystery"]
    assert "mystery" not in EMULATIONS


def test_streams_run_asynchronously_and_in_order(hip):
    stream = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    gate, order = threading.Event(), []
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: (gate.wait(), order.append("host")))
    ok(hip.hipLaunchHostFunc(stream, ctypes.cast(callback, ctypes.c_void_p).value, None))
    start, stop = ok(hip.hipEventCreateWithFlags(0)), ok(hip.hipEventCreateWithFlags(0))
    ok(hip.hipEventRecord(start, stream))
    ok(hip.hipEventRecord(stop, stream))
    assert hip.hipStreamQuery(stream) == (E.hipErrorNotReady,)
    assert hip.hipEventQuery(stop) == (E.hipErrorNotReady,)
    assert hip.hipEventElapsedTime(start, stop)[0] == E.hipErrorNotReady
    gate.set()
    ok(hip.hipStreamSynchronize(stream))
    assert order == ["host"] and hip.hipStreamQuery(stream) == (E.hipSuccess,)
    assert ok(hip.hipEventElapsedTime(start, stop)) >= 0.0
    untimed = ok(hip.hipEventCreateWithFlags(hip.hipEventDisableTiming))
    ok(hip.hipEventRecord(untimed, stream))
    ok(hip.hipEventSynchronize(untimed))
    assert hip.hipEventElapsedTime(start, untimed)[0] == E.hipErrorInvalidHandle
    for event in (start, stop, untimed):
        ok(hip.hipEventDestroy(event))
    ok(hip.hipStreamDestroy(stream))


def test_registered_memory_and_pointer_queries():
    hip = FakeHip(device_count=1, separate_register_alias=True)
    host = np.zeros(1024, np.uint8)
    base = host.ctypes.data
    ok(hip.hipHostRegister(base, 1024, hip.hipHostRegisterMapped))
    assert hip.hipHostRegister(base + 16, 8, 0) == (E.hipErrorHostMemoryAlreadyRegistered,)
    device = int(ok(hip.hipHostGetDevicePointer(base + 8, 0)))
    assert device != base + 8
    attributes = ok(hip.hipPointerGetAttributes(base + 8))
    assert attributes.type == hip.hipMemoryType.hipMemoryTypeHost and int(attributes.devicePointer) == device
    low, size = ok(hip.hipMemGetAddressRange(base + 8))
    assert (int(low), size) == (base, 1024)
    ok(hip.hipMemsetD8(device, 7, 4))  # the alias reaches the user's bytes
    assert host[8:12].tolist() == [7, 7, 7, 7] and host[12] == 0
    ok(hip.hipHostUnregister(base))
    assert hip.hipHostUnregister(base) == (E.hipErrorHostMemoryNotRegistered,)
    assert ok(hip.hipPointerGetAttributes(base)).type == hip.hipMemoryType.hipMemoryTypeUnregistered
    assert hip.hipMemsetD8(device, 1, 1) == (E.hipErrorInvalidValue,)  # alias gone: use after free
    assert any("use after free" in v for v in hip.violations)


def test_managed_hints_need_managed_memory(hip):
    managed = ok(hip.hipMallocManaged(4096, hip.hipMemAttachGlobal))
    ok(hip.hipMemPrefetchAsync(managed, 4096, 1, None))
    ok(hip.hipMemAdvise(managed, 4096, hip.hipMemoryAdvise.hipMemAdviseSetReadMostly, 0))
    assert hip.managed_location[int(managed)] == 1
    ctypes.memset(int(managed), 5, 8)  # host-accessible at its address
    device = ok(hip.hipMalloc(64))
    assert hip.hipMemPrefetchAsync(device, 64, 0, None) == (E.hipErrorInvalidValue,)
    assert any("not managed memory" in v for v in hip.violations)
    ok(hip.hipFree(managed))
    ok(hip.hipFree(device))


def test_stream_ordered_allocation_frees_in_order(hip):
    stream = ok(hip.hipStreamCreateWithFlags(hip.hipStreamNonBlocking))
    ptr = ok(hip.hipMallocAsync(64, stream))
    ok(hip.hipMemsetD32Async(ptr, 1, 16, stream))
    ok(hip.hipFreeAsync(ptr, stream))
    ok(hip.hipStreamSynchronize(stream))
    assert hip.space.find(int(ptr)).freed
    assert hip.hipFreeAsync(ptr, stream) == (E.hipErrorInvalidValue,)
    ok(hip.hipStreamDestroy(stream))


def test_teardown_reports_every_leak(hip):
    ok(hip.hipMalloc(8))
    ok(hip.hipHostMalloc(8, 0))
    load(hip, conformance_images()["kernels"])
    ok(hip.hipStreamCreateWithFlags(0))
    ok(hip.hipEventCreateWithFlags(0))
    with pytest.warns(FakeHipWarning):
        leaks = hip.teardown()
    kinds = " ".join(leaks)
    for word in ("hipMalloc", "hipHostMalloc", "module not unloaded", "stream not destroyed", "event not destroyed"):
        assert word in kinds
    assert sum(v.startswith("leak:") for v in hip.violations) == 5


def test_emulations_match_the_image_signatures():
    code = codeobject.parse(conformance_images()["kernels"])
    ctor = codeobject.parse(conformance_images()["ctor_dtor"])
    kernels = {**code.kernels, **ctor.kernels}
    # Every kernel of the packaged images has its emulation, with the image's signature; the
    # others emulate kernels that conformance tests build from source (a struct by value, a
    # required work-group size, two sources linked).
    assert set(kernels) <= set(EMULATIONS), sorted(set(kernels) - set(EMULATIONS))
    assert set(EMULATIONS) - set(kernels) == {"take_pair", "fixed_block", "linked_fill"}
    kernels.update(codeobject.parse(conformance.link((CALLER, CALLEE), "gfx90a")).kernels)
    for name in kernels:
        assert kernels[name].signature == EMULATIONS[name][0], name


def test_pytest_plugin_fails_a_run_that_leaks(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "test_leaky.py").write_text(
        "import pyoffload\n"
        "from pyoffload_amdgpu.fake_hip import FakeHip\n"
        "def test_leak():\n"
        "    assert any(d.backend == 'amdgpu' for d in pyoffload.devices())\n"
        "    FakeHip.instances[-1].hipMalloc(64)  # behind the plugin's back: never freed\n"
    )
    env = dict(os.environ, PYOFFLOAD_PLUGINS="amdgpu", PYOFFLOAD_AMDGPU_DRIVER="fake")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert "1 passed" in result.stdout
    assert result.returncode == 1, result.stdout
    assert "leak: hipMalloc" in result.stdout and "fake HIP driver" in result.stdout
