"""The CUDA backend's hook implementations, on pycuda's ``pycuda.driver``.

Importing this module never touches the driver: ``init_impl`` imports the binding (the real
``pycuda.driver``, or the fake one with ``PYOFFLOAD_CUDA_DRIVER=fake``) and raises
``NoDevicesError`` with the loader's or the driver's reason when there is nothing to use.

Not provided, because pycuda exposes no binding for them (the generic defaults apply and
docs/backends/cuda.md lists them): stream-ordered allocation (cuMemAllocAsync), prefetch and
advice for managed memory (cuMemPrefetchAsync, cuMemAdvise), "is this pointer already pinned"
(cuPointerGetAttribute), and kernel signatures.  Host functions are emulated (see queues.py).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pyoffload.backend import (
    AllocKind,
    DeviceDesc,
    DeviceType,
    InitFini,
    InvalidArgumentError,
    MemoryConnection,
    NoDevicesError,
    PlatformDesc,
    SymbolDesc,
    UnsupportedError,
    hookimpl,
)

from . import conformance
from .binding import driver_mode, errors, load_driver
from .devices import CudaContext, CudaDevice
from .launch import check_params, pack_args
from .programs import CudaKernel, CudaProgram
from .queues import CudaQueue, QueueEvent


class _State:
    """Everything the backend holds between init_impl and deinit_impl."""

    def __init__(self, cuda: Any, devices: list[CudaDevice]) -> None:
        self.cuda = cuda
        self.devices = devices
        self.lock = threading.Lock()
        self.allocs: dict[int, Any] = {}  # address -> the pycuda object that owns it
        self.locked: dict[int, Any] = {}  # host address -> pycuda's registered array
        self.peer_users: dict[tuple[int, int], int] = {}  # (from, to) ordinal -> contexts using it


_state: _State | None = None


def _st() -> _State:
    if _state is None:
        raise NoDevicesError("the CUDA backend is not initialised")
    return _state


# --------------------------------------------------------------------------------------------
# Lifecycle and devices
# --------------------------------------------------------------------------------------------


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    global _state
    cuda = load_driver()
    try:
        cuda.init()
        count = int(cuda.Device.count())
    except cuda.Error as exc:
        raise NoDevicesError(str(exc)) from exc
    if count == 0:
        raise NoDevicesError("cuInit succeeded but the driver reports no CUDA device")
    devices = [CudaDevice(cuda, i) for i in range(count)]
    version = int(cuda.get_driver_version())
    fake = driver_mode() == "fake"
    _state = _State(cuda, devices)
    platform = PlatformDesc(
        name="fake" if fake else "CUDA",
        vendor="NVIDIA",
        version=f"CUDA {version // 1000}.{version % 1000 // 10}" + (" (fake driver)" if fake else ""),
        devices=tuple(DeviceDesc(d.name, "NVIDIA", DeviceType.GPU, d) for d in devices),
        handle=cuda,
    )
    return [platform]


@hookimpl
def deinit_impl() -> None:
    global _state
    st, _state = _state, None
    if st is None:
        return
    for reg in st.locked.values():
        reg.base.unregister()
    for obj in st.allocs.values():
        _free_object(obj)
    st.locked.clear()
    st.allocs.clear()
    for d in st.devices:
        d.release()
    finish = getattr(st.cuda, "finish", None)  # the fake driver's leak report
    if finish is not None:
        finish()


@hookimpl
def device_info_impl(device: CudaDevice) -> dict[str, Any]:
    cuda = device.cuda
    with errors(cuda, "device info"):
        info: dict[str, Any] = {
            "memory_bytes": int(device.dev.total_memory()),
            "architecture": device.arch,
            "compute_capability": f"{device.sm // 10}.{device.sm % 10}",
            "driver_version": _version_text(int(cuda.get_driver_version())),
            "pci_bus_id": str(device.dev.pci_bus_id()),
        }
    for key, attr in (
        ("compute_units", "MULTIPROCESSOR_COUNT"),
        ("max_work_group_size", "MAX_THREADS_PER_BLOCK"),
        ("warp_size", "WARP_SIZE"),
        ("local_memory_bytes", "MAX_SHARED_MEMORY_PER_BLOCK"),
        ("unified_addressing", "UNIFIED_ADDRESSING"),
        ("managed_memory", "MANAGED_MEMORY"),
        ("concurrent_managed_access", "CONCURRENT_MANAGED_ACCESS"),
        ("can_map_host_memory", "CAN_MAP_HOST_MEMORY"),
    ):
        value = device.attribute(attr)
        if value is not None:
            info[key] = bool(value) if key in ("unified_addressing", "managed_memory",
                                               "concurrent_managed_access", "can_map_host_memory") else value
    return info


def _version_text(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


# --------------------------------------------------------------------------------------------
# Contexts: the devices' primary contexts, with peer access between capable pairs
# --------------------------------------------------------------------------------------------


@hookimpl
def context_create_impl(devices: Sequence[CudaDevice]) -> CudaContext:
    st = _st()
    ctx = CudaContext(tuple(devices))
    try:
        for a in devices:
            for b in devices:
                if a is not b and a.dev.can_access_peer(b.dev):
                    _enable_peer(st, a, b)
                    ctx.peers.append((a, b))
    except BaseException:
        context_destroy_impl(ctx)
        raise
    return ctx


def _enable_peer(st: _State, a: CudaDevice, b: CudaDevice) -> None:
    key = (a.ordinal, b.ordinal)
    with st.lock:
        if st.peer_users.get(key, 0) == 0:
            with a.current():
                try:
                    st.cuda.Context.enable_peer_access(b.primary_context())
                except st.cuda.Error as exc:
                    if "already enabled" not in str(exc):
                        raise
        st.peer_users[key] = st.peer_users.get(key, 0) + 1


@hookimpl
def context_destroy_impl(context: CudaContext) -> None:
    st = _st()
    for a, b in context.peers:
        key = (a.ordinal, b.ordinal)
        with st.lock:
            st.peer_users[key] -= 1
            if st.peer_users[key] == 0:
                del st.peer_users[key]
                with a.current(), errors(st.cuda, "disabling peer access"):
                    st.cuda.Context.disable_peer_access(b.primary_context())
    context.peers.clear()


@hookimpl
def memory_connection_impl(
    context_a: CudaContext, device_a: CudaDevice | None, context_b: CudaContext, device_b: CudaDevice | None
) -> MemoryConnection:
    if context_a is not context_b:
        # pyoffload contexts own their memory: even on one device (one primary context) a
        # pointer of one context is not meant for another, so copies go through the host.
        return MemoryConnection.NONE
    if device_a is None or device_b is None or device_a is device_b:
        # HOST memory is mapped, portable, pinned memory: under unified addressing its address
        # is valid on every device of the context.
        return MemoryConnection.UNIFIED
    if (device_a, device_b) in context_a.peers and (device_b, device_a) in context_a.peers:
        return MemoryConnection.UNIFIED  # peer-mapped: each device dereferences the other's memory
    if device_a.dev.can_access_peer(device_b.dev):
        return MemoryConnection.MIGRATABLE
    return MemoryConnection.NONE


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def _free_object(obj: Any) -> None:
    if isinstance(obj, np.ndarray):  # pagelocked or managed: the allocation is the base
        obj.base.free()
    else:
        obj.free()


@hookimpl
def data_alloc_impl(context: CudaContext, device: CudaDevice | None, size: int, kind: AllocKind) -> int:
    st = _st()
    cuda = st.cuda
    dev = device if device is not None else context.devices[0]
    with dev.current(), errors(cuda, f"allocating {size} bytes of {kind.name} memory"):
        if kind is AllocKind.DEVICE:
            obj: Any = cuda.mem_alloc(size)
            ptr = int(obj)
        elif kind is AllocKind.HOST:
            # Mapped (device-accessible at the same address under unified addressing) and
            # portable (pinned for every context, so all devices of the context can use it).
            flags = int(cuda.host_alloc_flags.DEVICEMAP) | int(cuda.host_alloc_flags.PORTABLE)
            obj = cuda.pagelocked_empty(size, np.uint8, "C", flags)
            ptr = int(obj.ctypes.data)
            if int(obj.base.get_device_pointer()) != ptr:
                obj.base.free()
                raise UnsupportedError("pinned host memory is mapped at another device address "
                                       "(no unified addressing)")
        elif kind is AllocKind.MANAGED:
            obj = cuda.managed_empty(size, np.uint8, "C", int(cuda.mem_attach_flags.GLOBAL))
            ptr = int(obj.ctypes.data)
        else:  # pragma: no cover - the generic layer checks kinds
            raise InvalidArgumentError(f"unknown allocation kind {kind!r}")
    with st.lock:
        st.allocs[ptr] = obj
    return ptr


@hookimpl
def data_free_impl(context: CudaContext, device: CudaDevice | None, ptr: int, kind: AllocKind) -> None:
    st = _st()
    with st.lock:
        obj = st.allocs.pop(ptr)
    # pycuda makes the allocation's own context current to free it.
    with errors(st.cuda, f"freeing {kind.name} memory at 0x{ptr:x}"):
        _free_object(obj)


def _async_or_sync(device: CudaDevice, queue: CudaQueue | None, what: str,
                   run: Callable[[Any], None]) -> QueueEvent | None:
    """Run ``run(stream)`` on the queue, or synchronously (``stream=None``, then wait)."""
    if queue is not None:
        return queue.submit(run)
    with device.current(), errors(device.cuda, what):
        run(None)
        device.cuda.Context.synchronize()
    return None


@hookimpl
def data_submit_impl(device: CudaDevice, queue: CudaQueue | None, dst: int, src: memoryview, size: int) -> Any:
    cuda = device.cuda
    view = src[:size]

    def run(stream: Any) -> None:
        if stream is None:
            cuda.memcpy_htod(dst, view)
        else:
            cuda.memcpy_htod_async(dst, view, stream)

    return _async_or_sync(device, queue, "copying host to device", run)


@hookimpl
def data_retrieve_impl(device: CudaDevice, queue: CudaQueue | None, dst: memoryview, src: int, size: int) -> Any:
    cuda = device.cuda
    view = dst[:size]

    def run(stream: Any) -> None:
        if stream is None:
            cuda.memcpy_dtoh(view, src)
        else:
            cuda.memcpy_dtoh_async(view, src, stream)

    return _async_or_sync(device, queue, "copying device to host", run)


@hookimpl
def data_exchange_impl(src_device: CudaDevice, src: int, dst_device: CudaDevice, dst: int, size: int,
                       queue: CudaQueue | None) -> Any:
    cuda = dst_device.cuda

    def run(stream: Any) -> None:
        if src_device is dst_device:
            if stream is None:
                cuda.memcpy_dtod(dst, src, size)
            else:
                cuda.memcpy_dtod_async(dst, src, size, stream)
        else:
            dst_ctx, src_ctx = dst_device.primary_context(), src_device.primary_context()
            if stream is None:
                cuda.memcpy_peer(dst, src, size, dst_ctx, src_ctx)
            else:
                cuda.memcpy_peer_async(dst, src, size, dst_ctx, src_ctx, stream)

    return _async_or_sync(dst_device, queue, "copying device to device", run)


@hookimpl
def data_fill_impl(device: CudaDevice, queue: CudaQueue | None, ptr: int, pattern: bytes, size: int) -> Any:
    cuda = device.cuda
    # A pattern that repeats a shorter one is filled with the narrower memset.
    while len(pattern) > 1 and pattern[: len(pattern) // 2] * 2 == pattern:
        pattern = pattern[: len(pattern) // 2]
    width = len(pattern)
    if width not in (1, 2, 4) or ptr % width:
        raise UnsupportedError(f"cuMemsetD* fills 1, 2 or 4 aligned bytes, not a {width}-byte pattern at 0x{ptr:x}")
    value = int.from_bytes(pattern, "little")
    count = size // width
    sync_fn = {1: cuda.memset_d8, 2: cuda.memset_d16, 4: cuda.memset_d32}[width]
    async_fn = {1: cuda.memset_d8_async, 2: cuda.memset_d16_async, 4: cuda.memset_d32_async}[width]

    def run(stream: Any) -> None:
        if stream is None:
            sync_fn(ptr, value, count)
        else:
            async_fn(ptr, value, count, stream)

    return _async_or_sync(device, queue, f"filling {size} bytes", run)


@hookimpl
def data_lock_impl(device: CudaDevice, ptr: int, size: int) -> int:
    st = _st()
    cuda = st.cuda
    # pycuda registers numpy arrays: view the range as one (it does not own the memory).
    array = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(ptr))
    flags = int(cuda.mem_host_register_flags.DEVICEMAP) | int(cuda.mem_host_register_flags.PORTABLE)
    with device.current(), errors(cuda, f"pinning {size} bytes at 0x{ptr:x}"):
        registered = cuda.register_host_memory(array, flags)
        dptr = int(registered.base.get_device_pointer())
    with st.lock:
        st.locked[ptr] = registered
    return dptr


@hookimpl
def data_unlock_impl(device: CudaDevice, ptr: int) -> None:
    st = _st()
    with st.lock:
        registered = st.locked.pop(ptr)
    with errors(st.cuda, f"unpinning 0x{ptr:x}"):
        registered.base.unregister()


# --------------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------------


@hookimpl
def load_binary_impl(context: CudaContext, device: CudaDevice, image: bytes) -> CudaProgram:
    return CudaProgram(device, image)


@hookimpl
def unload_binary_impl(device: CudaDevice, program: CudaProgram) -> None:
    program.release()


@hookimpl
def global_init_fini_impl(device: CudaDevice, program: CudaProgram) -> InitFini:
    return program.init_fini()


@hookimpl
def get_symbols_impl(device: CudaDevice, program: CudaProgram) -> Sequence[SymbolDesc]:
    return program.symbol_descs()


@hookimpl
def get_kernel_impl(device: CudaDevice, program: CudaProgram, name: str) -> CudaKernel:
    return program.kernel(name)


@hookimpl
def get_global_impl(device: CudaDevice, program: CudaProgram, name: str) -> tuple[int, int]:
    return program.global_variable(name)


# --------------------------------------------------------------------------------------------
# Queues, launches, events
# --------------------------------------------------------------------------------------------


@hookimpl
def queue_create_impl(context: CudaContext, device: CudaDevice, profiling: bool) -> CudaQueue:
    return CudaQueue(device, profiling)


@hookimpl
def queue_destroy_impl(device: CudaDevice, queue: CudaQueue) -> None:
    queue.release()


@hookimpl
def queue_synchronize_impl(device: CudaDevice, queue: CudaQueue) -> None:
    queue.synchronize()


@hookimpl
def queue_query_impl(device: CudaDevice, queue: CudaQueue) -> bool:
    return queue.query()


def _launcher(device: CudaDevice, queue: CudaQueue | None, kernel: CudaKernel,
              grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[Any, ...]) -> Callable[[], Any]:
    params, shared = pack_args(args)
    check_params(kernel.name, kernel.param_sizes, params)
    function = kernel.function
    if function is None:
        raise InvalidArgumentError(f"kernel {kernel.name!r} belongs to an unloaded program")

    def run(stream: Any) -> None:
        function(*params, grid=grid, block=block, stream=stream, shared=shared)

    return lambda: _async_or_sync(device, queue, f"launching {kernel.name!r}", run)


@hookimpl
def launch_impl(device: CudaDevice, queue: CudaQueue | None, kernel: CudaKernel, grid: tuple[int, int, int],
                block: tuple[int, int, int], args: tuple[Any, ...]) -> Any:
    return _launcher(device, queue, kernel, grid, block, args)()


@hookimpl
def launch_prepare_impl(device: CudaDevice, queue: CudaQueue | None, kernel: CudaKernel,
                        grid: tuple[int, int, int], block: tuple[int, int, int],
                        args: tuple[Any, ...]) -> Callable[[], Any]:
    return _launcher(device, queue, kernel, grid, block, args)


@hookimpl
def enqueue_host_function_impl(device: CudaDevice, queue: CudaQueue, fn: Callable[[], None]) -> QueueEvent:
    return queue.host_function(fn)


@hookimpl
def event_wait_impl(device: CudaDevice, event: QueueEvent) -> None:
    event.wait()


@hookimpl
def event_query_impl(device: CudaDevice, event: QueueEvent) -> bool:
    return event.query()


@hookimpl
def event_elapsed_impl(device: CudaDevice, start: QueueEvent, end: QueueEvent) -> float:
    if start.host_function or end.host_function:
        raise UnsupportedError("host functions have no device timestamps")
    if not (start.timing and end.timing):
        raise UnsupportedError("elapsed time needs events of a profiling queue")
    start.wait()
    end.wait()
    if start.cuda_event is None or end.cuda_event is None:
        raise UnsupportedError("the event was released")
    with device.current(), errors(device.cuda, "reading event timestamps"):
        return float(start.cuda_event.time_till(end.cuda_event))


# --------------------------------------------------------------------------------------------
# Conformance suite support
# --------------------------------------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: CudaDevice) -> dict[str, bytes] | None:
    return conformance.conformance_images(device.sm)


@hookimpl
def known_failures_impl(device: CudaDevice) -> dict[str, str]:
    return {}
