"""SVM memory: real device addresses, the kind -> SVM mapping, connections and copies."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Context, MemoryConnection
from pyoffload_opencl import svm
from pyoffload_opencl.handles import SVM_COARSE_GRAIN_BUFFER, SVM_FINE_GRAIN_BUFFER, SVM_FINE_GRAIN_SYSTEM
from pyoffload_opencl.plugin import data_alloc_impl, data_free_impl


def _svm_allocation(context, ptr: int):
    """The cl.SVMAllocation containing ``ptr`` (the caching allocator hands out parts of one)."""
    found = [a for base, a in context.handle.allocations.items() if base <= ptr < base + a.size]
    assert len(found) == 1, f"{ptr:#x} is in no SVM allocation of the context"
    return found[0]


@pytest.mark.parametrize("kind", [AllocKind.HOST, AllocKind.MANAGED])
def test_host_visible_kinds_are_fine_grain_and_shared_in_place(dev, kernels, queue, kind) -> None:
    mem = dev.default_context.alloc(64, kind) if kind is AllocKind.HOST else dev.alloc(64, kind)
    _svm_allocation(mem.context, mem.ptr)  # the pointer is an SVM address itself
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
    assert isinstance(_svm_allocation(mem.context, mem.ptr + 100), cl.SVMAllocation)
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
    "caps,kinds",
    [
        (SVM_COARSE_GRAIN_BUFFER | SVM_FINE_GRAIN_BUFFER, ("DEVICE", "HOST", "MANAGED")),
        (SVM_COARSE_GRAIN_BUFFER, ("DEVICE",)),
        (SVM_FINE_GRAIN_BUFFER, ("HOST", "MANAGED")),
        (0, ()),
    ],
)
def test_memory_kinds_follow_the_svm_capabilities(caps, kinds) -> None:
    # The generic layer refuses the kinds a device does not list with UNSUPPORTED.
    assert svm.memory_kinds(caps) == kinds


@pytest.mark.parametrize(
    "caps,cpu,unified,kinds",
    [
        (SVM_COARSE_GRAIN_BUFFER | SVM_FINE_GRAIN_BUFFER, True, True, ("DEVICE", "HOST", "MANAGED")),
        (SVM_COARSE_GRAIN_BUFFER, True, True, ("DEVICE",)),
        (SVM_COARSE_GRAIN_BUFFER | SVM_FINE_GRAIN_BUFFER, False, True, ("HOST", "MANAGED")),  # a GPU
        (SVM_COARSE_GRAIN_BUFFER | SVM_FINE_GRAIN_BUFFER, True, False, ("HOST", "MANAGED")),  # a CPU elsewhere
        (SVM_COARSE_GRAIN_BUFFER, False, False, ()),
    ],
)
def test_device_memory_is_host_addressable_only_on_a_cpu_device_with_unified_memory(caps, cpu, unified, kinds) -> None:
    assert svm.host_addressable_kinds(caps, cpu, unified) == kinds


def test_a_cpu_device_says_its_device_memory_is_host_addressable_and_it_is(dev, kernels, queue) -> None:
    import pyopencl as cl

    native = dev.native
    cpu_with_own_memory = bool(native.type & cl.device_type.CPU) and bool(native.host_unified_memory)
    assert dev.info["host_addressable_kinds"] == svm.host_addressable_kinds(
        dev.info["opencl.svm_capabilities"], bool(native.type & cl.device_type.CPU), bool(native.host_unified_memory)
    )
    assert dev.host_addressable(AllocKind.DEVICE) is cpu_with_own_memory
    assert dev.host_addressable(AllocKind.HOST) is ("HOST" in dev.info["memory_kinds"])
    if not cpu_with_own_memory:
        pytest.skip(f"{dev.id} is not a CPU device whose memory is the host's")
    # What the device's queue wrote, the host reads at the address once the work completed ...
    mem = dev.alloc(4096)
    queue.launch(kernels.kernel("iota_i32"), 16, 64, [mem, np.int32(1024), np.int32(-3)]).wait()
    assert (np.frombuffer(ctypes.string_at(mem.ptr, 4096), np.int32) == np.arange(1024) - 3).all()
    # ... and what the host writes there, the device's own copies and kernels see.
    ctypes.memmove(mem.ptr + 8, np.full(4, 11, np.int32).tobytes(), 16)
    back = np.zeros(1024, np.int32)
    pyoffload.memcpy(back, mem)
    assert back[:6].tolist() == [-3, -2, 11, 11, 11, 11] and back[6] == 3
    x = dev.alloc(64, AllocKind.DEVICE)
    ctypes.memmove(x.ptr, np.ones(16, np.float32).tobytes(), 64)
    y = dev.alloc(64, AllocKind.DEVICE)
    ctypes.memmove(y.ptr, np.full(16, 2.0, np.float32).tobytes(), 64)
    queue.launch(kernels.kernel("axpy_f32"), 1, 16, [y, x, np.float32(3.0), np.int32(16)]).wait()
    assert np.frombuffer(ctypes.string_at(y.ptr, 64), np.float32).tolist() == [5.0] * 16
    for allocation in (mem, x, y):
        allocation.free()


def test_device_reports_its_kinds_and_standard_info(dev) -> None:
    info = dev.info
    assert info["memory_kinds"] == svm.memory_kinds(info["opencl.svm_capabilities"])
    for key in (
        "global_memory_bytes",
        "compute_units",
        "max_work_group_size",
        "max_alloc_bytes",
        "local_memory_bytes",
        "address_bits",
        "clock_mhz",
    ):
        assert isinstance(info[key], int) and info[key] > 0, key
    assert len(info["max_work_item_sizes"]) == 3 and info["driver_version"]
    extras = {k for k in info if k.startswith("opencl.")}
    assert {"opencl.version", "opencl.extensions", "opencl.program_scope_globals"} <= extras
    assert not {k for k in info if "." not in k} - set(pyoffload.backend.INFO_KEYS)


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
    if dev.info["opencl.svm_capabilities"] & SVM_FINE_GRAIN_SYSTEM:
        pytest.skip("this device has fine-grain system SVM")
    buf = np.zeros(1024, np.uint8)
    with pytest.raises(pyoffload.UnsupportedError) as err:
        dev.lock(buf)
    assert "system SVM" in str(err.value)
    assert not pyoffload.is_pinned(buf.ctypes.data)


def test_free_releases_the_svm_allocation(dev) -> None:
    context = dev.default_context.handle
    ptr = data_alloc_impl(context, dev.handle, 128, AllocKind.MANAGED)
    assert context.allocations[ptr].svm_ptr == ptr
    data_free_impl(context, dev.handle, ptr, AllocKind.MANAGED)
    assert ptr not in context.allocations


def test_overlapping_device_copy_is_staged_by_the_generic_layer(dev) -> None:
    mem = dev.alloc(64)
    pyoffload.memcpy(mem, np.arange(16, dtype=np.int32))
    pyoffload.memcpy(mem.ptr + 8, mem.ptr, 32)  # clEnqueueSVMMemcpy refuses overlap: UNSUPPORTED
    back = np.zeros(16, np.int32)
    pyoffload.memcpy(back, mem)
    assert back.tolist() == [0, 1, 0, 1, 2, 3, 4, 5, 6, 7] + list(range(10, 16))


def test_prefetch_of_managed_memory(dev, queue) -> None:
    mem = dev.alloc(4096, AllocKind.MANAGED)
    ctypes.memset(mem.ptr, 7, 4096)
    pyoffload.prefetch(mem, 4096, dev, queue=queue)
    pyoffload.prefetch(mem, 4096, None, queue=queue)
    queue.wait()
    assert ctypes.string_at(mem.ptr, 4) == b"\x07" * 4
