"""SVM memory: real device addresses, the kind -> SVM mapping, connections and copies."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Context, Errc, MemoryConnection
from pyoffload_opencl import svm
from pyoffload_opencl.handles import SVM_COARSE_GRAIN_BUFFER, SVM_FINE_GRAIN_BUFFER


@pytest.mark.parametrize("kind", [AllocKind.HOST, AllocKind.MANAGED])
def test_host_visible_kinds_are_fine_grain_and_shared_in_place(dev, kernels, queue, kind) -> None:
    mem = dev.default_context.alloc(64, kind) if kind is AllocKind.HOST else dev.alloc(64, kind)
    record = svm.REGISTRY.find(mem.ptr)
    assert record is not None and record.base == mem.ptr
    assert record.allocation.svm_ptr == mem.ptr  # the pointer is the SVM address itself
    # The kernel writes through the pointer; the host reads the same address, no copy.
    queue.launch(kernels.kernel("iota_i32"), 1, 16, [mem, np.int32(16), np.int32(100)]).wait()
    assert np.frombuffer(ctypes.string_at(mem.ptr, 64), np.int32).tolist() == list(range(100, 116))
    # The host writes in place; the kernel sees it.
    ctypes.memmove(mem.ptr, np.full(16, 2.0, np.float32).tobytes(), 64)
    x = dev.alloc(64, AllocKind.MANAGED)
    ctypes.memmove(x.ptr, np.ones(16, np.float32).tobytes(), 64)
    queue.launch(kernels.kernel("axpy_f32"), 1, 16, [mem, x, np.float32(3.0), np.int32(16)]).wait()
    assert np.frombuffer(ctypes.string_at(mem.ptr, 64), np.float32).tolist() == [5.0] * 16


def test_device_kind_is_coarse_grain_svm(dev) -> None:
    import pyopencl as cl

    mem = dev.alloc(256)
    record = svm.REGISTRY.find(mem.ptr + 100)
    assert record is not None and record.base == mem.ptr and record.kind is AllocKind.DEVICE
    # pyopencl's SVMAllocation does not expose its flags; the registry keeps the kind and the
    # fine-grain flag is only requested for host-visible kinds:
    assert svm.required_caps(AllocKind.DEVICE) == SVM_COARSE_GRAIN_BUFFER
    assert isinstance(record.allocation, cl.SVMAllocation)
    pyoffload.memcpy(mem, np.arange(64, dtype=np.int32))
    back = np.zeros(64, np.int32)
    pyoffload.memcpy(back, mem)
    assert back.tolist() == list(range(64))


def test_interior_pointers_as_kernel_arguments(dev, kernels, queue) -> None:
    mem = dev.alloc(64)
    pyoffload.memfill(mem, np.int32(-1))
    queue.launch(kernels.kernel("iota_i32"), 1, 4, [mem.ptr + 16, np.int32(4), np.int32(7)]).wait()
    host = np.zeros(16, np.int32)
    pyoffload.memcpy(host, mem)
    assert host.tolist() == [-1] * 4 + [7, 8, 9, 10] + [-1] * 8
    assert pyoffload.mem_info(mem.ptr + 16).base == mem.ptr


@pytest.mark.parametrize(
    "kind,caps,needed",
    [
        (AllocKind.DEVICE, SVM_FINE_GRAIN_BUFFER, "coarse-grain"),
        (AllocKind.MANAGED, SVM_COARSE_GRAIN_BUFFER, "fine-grain"),
        (AllocKind.HOST, SVM_COARSE_GRAIN_BUFFER, "fine-grain"),
    ],
)
def test_kind_without_its_svm_is_unsupported(dev, monkeypatch, kind, caps, needed) -> None:
    monkeypatch.setattr(dev.handle, "svm_caps", caps)
    ctx = Context([dev])
    try:
        before = len(svm.REGISTRY._bases)
        with pytest.raises(pyoffload.UnsupportedError) as err:
            if kind is AllocKind.HOST:
                ctx.alloc(64, kind)
            else:
                ctx.alloc(64, kind, device=dev)
        assert err.value.errc is Errc.UNSUPPORTED
        assert kind.name in str(err.value) and needed in str(err.value)
        assert len(svm.REGISTRY._bases) == before  # nothing was created
    finally:
        ctx.close()


def test_memory_connections(dev) -> None:
    a, b = Context([dev]), Context([dev])
    try:
        assert pyoffload.memory_connection((a, dev), (a, dev)) is MemoryConnection.UNIFIED
        assert pyoffload.memory_connection((a, dev), (b, dev)) is MemoryConnection.NONE
        # Two contexts: a copy between them is staged through the host, and still right.
        src, dst = a.alloc(32, device=dev), b.alloc(32, device=dev)
        pyoffload.memcpy(src, np.arange(8, dtype=np.int32))
        pyoffload.memcpy(dst, src)
        back = np.zeros(8, np.int32)
        pyoffload.memcpy(back, dst)
        assert back.tolist() == list(range(8))
    finally:
        a.close()
        b.close()


def test_two_devices_of_one_context_share_pointers(ocl_devices) -> None:
    if len(ocl_devices) < 2:
        pytest.skip('needs two OpenCL devices (POCL_DEVICES="pthread pthread")')
    d0, d1 = ocl_devices[:2]
    ctx = Context([d0, d1])
    try:
        assert pyoffload.memory_connection((ctx, d0), (ctx, d1)) is MemoryConnection.UNIFIED
        src, dst = ctx.alloc(64, device=d0), ctx.alloc(64, device=d1)
        pyoffload.memcpy(src, np.arange(16, dtype=np.int32))
        pyoffload.memcpy(dst, src)  # data_exchange_impl: one SVM copy on d1's queue
        back = np.zeros(16, np.int32)
        pyoffload.memcpy(back, dst)
        assert back.tolist() == list(range(16))
        # UNIFIED: a kernel on d1 writes d0's memory through the same pointer.
        from pyoffload_opencl.plugin import conformance_images_impl

        with d1.load_program(conformance_images_impl(d1.handle)["kernels"], context=ctx) as prog:
            q1 = d1.create_queue(context=ctx)
            q1.launch(prog.kernel("iota_i32"), 1, 16, [src, np.int32(16), np.int32(50)]).wait()
            q1.destroy()
        pyoffload.memcpy(back, src)
        assert back.tolist() == list(range(50, 66))
    finally:
        ctx.close()


def test_fill_patterns_direct_and_fallback(dev) -> None:
    mem = dev.alloc(24)
    pyoffload.memfill(mem, np.uint16(0xBEEF))
    back = bytearray(24)
    pyoffload.memcpy(back, mem)
    assert bytes(back) == bytes.fromhex("efbe") * 12
    # 3 bytes is no clEnqueueSVMMemFill pattern: the generic layer writes it out instead.
    pyoffload.memfill(mem, b"abc")
    pyoffload.memcpy(back, mem)
    assert bytes(back) == b"abc" * 8


def test_lock_is_unsupported_without_system_svm(dev) -> None:
    if dev.info["svm_fine_grain_system"]:
        pytest.skip("this device has fine-grain system SVM")
    buf = np.zeros(1024, np.uint8)
    with pytest.raises(pyoffload.UnsupportedError) as err:
        dev.lock(buf)
    assert "system SVM" in str(err.value)
    assert not pyoffload.is_pinned(buf.ctypes.data)


def test_free_releases_the_svm_allocation(dev) -> None:
    mem = dev.alloc(128, AllocKind.MANAGED)
    ptr = mem.ptr
    assert svm.REGISTRY.find(ptr) is not None
    pyoffload.free(mem)
    assert svm.REGISTRY.find(ptr) is None


class _ReleaseSpy:
    def __init__(self, real) -> None:
        self.real, self.released = real, 0

    def release(self) -> None:
        self.released += 1
        self.real.release()


def test_free_from_a_host_function_is_deferred_not_deadlocked(dev, kernels, queue) -> None:
    import threading

    victim = dev.alloc(64, AllocKind.MANAGED)
    record = svm.REGISTRY.find(victim.ptr)
    spy = record.allocation = _ReleaseSpy(record.allocation)
    gate = threading.Event()
    freed_inside = []

    def host_step() -> None:
        # The queue is blocked on this very function: a free that waited for it would hang.
        pyoffload.free(victim)
        freed_inside.append(spy.released)
        gate.wait()

    queue.launch_host_function(host_step)
    queue.launch(kernels.kernel("noop"), 1, 1, [])
    try:
        waiter = threading.Event()
        for _ in range(200):
            if freed_inside:
                break
            waiter.wait(0.05)
        assert freed_inside == [0], "free blocked, or released memory while its queue still ran"
    finally:
        gate.set()
        queue.wait()
    svm._REAPER.drain()
    assert spy.released == 1
