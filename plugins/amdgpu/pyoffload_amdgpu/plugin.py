"""The AMDGPU backend: pyoffload's ``*_impl`` hooks over hip-python's ``hip.hip``.

Importing this module never touches HIP: the binding is loaded in :func:`init_impl`, which reports
``NoDevicesError`` with the driver's reason when hip-python, the HIP runtime
(``libamdhip64.so``) or a GPU is missing.  ``PYOFFLOAD_AMDGPU_DRIVER=fake`` swaps in the fake
driver of :mod:`pyoffload_amdgpu.fake_hip`, which runs the same code paths without a GPU.

HIP keeps a *current device* per host thread and allocates, loads and launches on it, so every
hook that acts on a device first makes it current (``hipSetDevice`` is a cheap thread-local store).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from pyoffload.backend import (
    AllocKind,
    BackendError,
    DeviceDesc,
    DeviceType,
    InitFini,
    MemAdvice,
    MemoryConnection,
    NoDevicesError,
    PlatformDesc,
    SymbolDesc,
    SymbolKind,
    UnsupportedError,
    hookimpl,
)

from . import codeobject, conformance, driver, kernargs
from .driver import call
from .handles import (
    HipDevice,
    HipEvent,
    HipKernel,
    HipProgram,
    HipQueue,
    HostFunctionFailures,
)

# ``void (*)(void *userData)``: the callback type of hipLaunchHostFunc.
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _State:
    """The loaded binding and what init learned; one per initialised runtime."""

    def __init__(self, hip: Any, devices: list[HipDevice]) -> None:
        self.hip = hip
        self.devices = devices
        self.peer: dict[tuple[int, int], bool] = {}  # (from, to) -> peer access enabled
        self.async_allocations: set[int] = set()  # pointers from hipMallocAsync
        self.event_finalizers: list[weakref.finalize] = []  # pruned of dead ones as it grows
        self.lock = threading.Lock()


_state: _State | None = None


def _hip() -> Any:
    if _state is None:
        raise BackendError("the AMDGPU backend is not initialised")
    return _state.hip


def _use(device: HipDevice) -> Any:
    hip = _hip()
    call(hip, hip.hipSetDevice, device.ordinal)
    return hip


# ------------------------------------------------------------------------------------------
# Lifecycle and devices
# ------------------------------------------------------------------------------------------


def _query_device(hip: Any, ordinal: int, driver_version: int, runtime_version: int) -> HipDevice:
    props = call(hip, hip.hipGetDeviceProperties, ordinal)
    gcn_arch_name = str(props.gcnArchName) or "unknown"
    name = str(props.name) or f"AMD GPU {ordinal}"
    arch = codeobject.arch_name(gcn_arch_name)
    info = {
        "memory_bytes": int(props.totalGlobalMem),
        "compute_units": int(props.multiProcessorCount),
        "architecture": arch,
        "gcn_arch_name": gcn_arch_name,
        "driver_version": int(driver_version),
        "runtime_version": int(runtime_version),
        "max_work_group_size": int(props.maxThreadsPerBlock),
        "local_memory_bytes": int(props.sharedMemPerBlock),
        "wavefront_size": int(props.warpSize),
        "clock_rate_khz": int(props.clockRate),
        "managed_memory": bool(props.managedMemory),
        "pci_bus_id": int(props.pciBusID),
        "ordinal": ordinal,
    }
    return HipDevice(
        ordinal=ordinal,
        name=name,
        gcn_arch_name=gcn_arch_name,
        arch=arch,
        info=info,
        managed_memory=bool(props.managedMemory),
        memory_pools=bool(props.memoryPoolsSupported),
    )


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    global _state
    hip = driver.load_binding()
    try:
        (err,) = hip.hipInit(0)
    except (RuntimeError, OSError) as exc:
        # hip-python raises when it cannot dlopen libamdhip64.so: no ROCm on this machine.
        raise NoDevicesError(f"cannot load the HIP runtime: {exc}") from exc
    if not driver.is_success(err):
        raise NoDevicesError(f"hipInit failed: {driver.error_text(hip, err)}")
    err, count = hip.hipGetDeviceCount()
    if not driver.is_success(err) or int(count) == 0:
        reason = driver.error_text(hip, err) if not driver.is_success(err) else "0 devices"
        raise NoDevicesError(f"hipGetDeviceCount found no AMD GPU: {reason}")
    driver_version = call(hip, hip.hipDriverGetVersion)
    runtime_version = call(hip, hip.hipRuntimeGetVersion)
    devices = [_query_device(hip, i, driver_version, runtime_version) for i in range(int(count))]
    _state = _State(hip, devices)
    descs = tuple(DeviceDesc(d.name, "AMD", DeviceType.GPU, d) for d in devices)
    return [PlatformDesc("AMD HIP", "AMD", f"HIP {runtime_version}", descs, handle=None, short_name="hip")]


@hookimpl
def deinit_impl() -> None:
    global _state
    if _state is None:
        return
    state = _state
    hip = state.hip
    with state.lock:
        finalizers = list(state.event_finalizers)
    for finalizer in finalizers:
        finalizer()  # destroys the events pyoffload still holds; runs at most once
    _state = None
    for (src, dst), enabled in state.peer.items():
        if enabled:
            hip.hipSetDevice(src)
            hip.hipDeviceDisablePeerAccess(dst)
    driver.release_binding(hip)


@hookimpl
def device_info_impl(device: HipDevice) -> dict[str, Any]:
    return dict(device.info)


# ------------------------------------------------------------------------------------------
# Memory
# ------------------------------------------------------------------------------------------


def _context_device(context: Any) -> HipDevice:
    """Any device of the context (the default context is the tuple of its devices)."""
    if isinstance(context, HipDevice):
        return context
    for item in context if isinstance(context, (tuple, list)) else ():
        if isinstance(item, HipDevice):
            return item
    assert _state is not None
    return _state.devices[0]


@hookimpl
def data_alloc_impl(context: Any, device: HipDevice | None, size: int, kind: AllocKind) -> int:
    if kind is AllocKind.HOST:
        hip = _use(device or _context_device(context))
        # Portable: pinned for every device, not only the current one; mapped: device-visible.
        flags = hip.hipHostMallocPortable | hip.hipHostMallocMapped
        return int(call(hip, hip.hipHostMalloc, size, flags))
    assert device is not None
    hip = _use(device)
    if kind is AllocKind.DEVICE:
        return int(call(hip, hip.hipMalloc, size))
    if not device.managed_memory:
        raise UnsupportedError(f"{device.name} does not support managed memory")
    return int(call(hip, hip.hipMallocManaged, size, hip.hipMemAttachGlobal))


@hookimpl
def data_free_impl(context: Any, device: HipDevice | None, ptr: int, kind: AllocKind) -> None:
    hip = _use(device or _context_device(context))
    if kind is AllocKind.HOST:
        call(hip, hip.hipHostFree, ptr)
    else:
        call(hip, hip.hipFree, ptr)


def _destroy_event(state: _State, event: Any) -> None:
    # Runs when the handle is collected (any thread) or at deinit, whichever comes first.
    if _state is state:
        state.hip.hipEventDestroy(event)


def _record(device: HipDevice, queue: HipQueue, failures: HostFunctionFailures | None = None) -> HipEvent:
    """Record an event on the queue's stream marking the work enqueued so far.

    pyoffload drops event handles by letting them go, so each hipEvent is destroyed when its
    handle is garbage collected, and any still alive at deinit are destroyed then.
    """
    hip = _hip()
    assert _state is not None
    flags = hip.hipEventDefault if queue.profiling else hip.hipEventDisableTiming
    event = call(hip, hip.hipEventCreateWithFlags, flags)
    try:
        call(hip, hip.hipEventRecord, event, queue.stream)
    except BaseException:
        hip.hipEventDestroy(event)
        raise
    handle = HipEvent(device, event, queue.profiling, failures)
    finalizer = weakref.finalize(handle, _destroy_event, _state, event)
    with _state.lock:
        finalizers = _state.event_finalizers
        finalizers.append(finalizer)
        if len(finalizers) > 1024:
            finalizers[:] = [f for f in finalizers if f.alive]
    return handle


def _copy(device: HipDevice, queue: HipQueue | None, dst: Any, src: Any, size: int, kind: Any) -> HipEvent | None:
    hip = _use(device)
    if queue is None:
        call(hip, hip.hipMemcpy, dst, src, size, kind)
        return None
    call(hip, hip.hipMemcpyAsync, dst, src, size, kind, queue.stream)
    return _record(device, queue)


@hookimpl
def data_submit_impl(device: HipDevice, queue: HipQueue | None, dst: int, src: memoryview, size: int) -> Any:
    hip = _hip()
    return _copy(device, queue, dst, src, size, hip.hipMemcpyKind.hipMemcpyHostToDevice)


@hookimpl
def data_retrieve_impl(device: HipDevice, queue: HipQueue | None, dst: memoryview, src: int, size: int) -> Any:
    hip = _hip()
    return _copy(device, queue, dst, src, size, hip.hipMemcpyKind.hipMemcpyDeviceToHost)


@hookimpl
def data_exchange_impl(
    src_device: HipDevice | None, src: int, dst_device: HipDevice | None, dst: int, size: int, queue: HipQueue | None
) -> Any:
    hip = _hip()
    if src_device is None or dst_device is None or src_device is dst_device:
        # One device, or pinned host memory on one side: unified addressing lets the runtime
        # work out the direction (hipMemcpyDefault).
        device = dst_device or src_device or _context_device(())
        return _copy(device, queue, dst, src, size, hip.hipMemcpyKind.hipMemcpyDefault)
    _use(dst_device)
    if queue is None:
        call(hip, hip.hipMemcpyPeer, dst, dst_device.ordinal, src, src_device.ordinal, size)
        return None
    call(hip, hip.hipMemcpyPeerAsync, dst, dst_device.ordinal, src, src_device.ordinal, size, queue.stream)
    return _record(dst_device, queue)


@hookimpl
def data_fill_impl(device: HipDevice, queue: HipQueue | None, ptr: int, pattern: bytes, size: int) -> Any:
    hip = _use(device)
    # A pattern that repeats a shorter one (8 bytes of 0xAB, "abab") uses the narrower memset.
    width = next((w for w in (1, 2, 4) if len(pattern) % w == 0 and pattern == pattern[:w] * (len(pattern) // w)),
                 len(pattern))
    pattern = pattern[:width]
    setters = {
        1: (hip.hipMemsetD8, hip.hipMemsetD8Async),
        2: (hip.hipMemsetD16, hip.hipMemsetD16Async),
        4: (hip.hipMemsetD32, hip.hipMemsetD32Async),
    }
    if width not in setters:
        raise UnsupportedError(f"HIP has no {width}-byte memset")
    if ptr % width:
        raise UnsupportedError(f"hipMemsetD{8 * width} needs a {width}-byte aligned pointer")
    value = int.from_bytes(pattern, "little")
    sync_fn, async_fn = setters[width]
    if queue is None:
        call(hip, sync_fn, ptr, value, size // width)
        return None
    call(hip, async_fn, ptr, value, size // width, queue.stream)
    return _record(device, queue)


@hookimpl
def data_lock_impl(device: HipDevice, ptr: int, size: int) -> int:
    hip = _use(device)
    flags = hip.hipHostRegisterMapped | hip.hipHostRegisterPortable
    call(hip, hip.hipHostRegister, ptr, size, flags)
    try:
        return int(call(hip, hip.hipHostGetDevicePointer, ptr, 0))
    except BaseException:
        hip.hipHostUnregister(ptr)
        raise


@hookimpl
def data_unlock_impl(device: HipDevice, ptr: int) -> None:
    hip = _use(device)
    call(hip, hip.hipHostUnregister, ptr)


@hookimpl
def data_pinned_info_impl(device: HipDevice, ptr: int) -> tuple[int, int, int] | None:
    hip = _use(device)
    err, attributes = hip.hipPointerGetAttributes(ptr)
    # Pageable memory is an error on older runtimes and "unregistered" on newer ones.
    if not driver.is_success(err) or int(attributes.type) != int(hip.hipMemoryType.hipMemoryTypeHost):
        return None
    err, base, size = hip.hipMemGetAddressRange(ptr)
    if not driver.is_success(err):
        return None
    base = int(base)
    device_base = int(call(hip, hip.hipHostGetDevicePointer, base, 0))
    return base, int(size), device_base


@hookimpl
def data_prefetch_impl(device: HipDevice, queue: HipQueue | None, ptr: int, size: int, to_device: bool) -> Any:
    hip = _use(device)
    target = device.ordinal if to_device else hip.hipCpuDeviceId
    stream = queue.stream if queue is not None else None
    call(hip, hip.hipMemPrefetchAsync, ptr, size, target, stream)
    if queue is None:
        call(hip, hip.hipStreamSynchronize, None)
        return None
    return _record(device, queue)


_ADVICE = {
    MemAdvice.SET_READ_MOSTLY: "hipMemAdviseSetReadMostly",
    MemAdvice.UNSET_READ_MOSTLY: "hipMemAdviseUnsetReadMostly",
    MemAdvice.SET_PREFERRED_LOCATION: "hipMemAdviseSetPreferredLocation",
    MemAdvice.UNSET_PREFERRED_LOCATION: "hipMemAdviseUnsetPreferredLocation",
    MemAdvice.SET_ACCESSED_BY: "hipMemAdviseSetAccessedBy",
    MemAdvice.UNSET_ACCESSED_BY: "hipMemAdviseUnsetAccessedBy",
}


@hookimpl
def data_advise_impl(device: HipDevice, ptr: int, size: int, advice: MemAdvice) -> None:
    hip = _use(device)
    call(hip, hip.hipMemAdvise, ptr, size, getattr(hip.hipMemoryAdvise, _ADVICE[advice]), device.ordinal)


@hookimpl
def data_alloc_async_impl(context: Any, device: HipDevice | None, queue: HipQueue, size: int, kind: AllocKind) -> int | None:
    # HIP's stream-ordered allocator serves device memory only; the generic layer allocates the
    # other kinds synchronously after waiting for the queue, which keeps the observable order.
    if kind is not AllocKind.DEVICE or device is None or not device.memory_pools:
        return None
    hip = _use(device)
    ptr = int(call(hip, hip.hipMallocAsync, size, queue.stream))
    assert _state is not None
    with _state.lock:
        _state.async_allocations.add(ptr)
    return ptr


@hookimpl
def data_free_async_impl(context: Any, device: HipDevice | None, queue: HipQueue, ptr: int, kind: AllocKind) -> Any:
    assert _state is not None
    with _state.lock:
        if ptr not in _state.async_allocations or device is None:
            return None  # not from the stream-ordered pool: the generic layer waits, then frees
        _state.async_allocations.discard(ptr)
    hip = _use(device)
    try:
        call(hip, hip.hipFreeAsync, ptr, queue.stream)
    except BaseException:
        with _state.lock:
            _state.async_allocations.add(ptr)
        raise
    return _record(device, queue)


def _peer_enabled(src: HipDevice, dst: HipDevice) -> bool:
    """Let ``src`` access ``dst``'s memory if the hardware can; remember the answer."""
    assert _state is not None
    key = (src.ordinal, dst.ordinal)
    with _state.lock:
        if key in _state.peer:
            return _state.peer[key]
    hip = _use(src)
    can = bool(call(hip, hip.hipDeviceCanAccessPeer, src.ordinal, dst.ordinal))
    enabled = False
    if can:
        (err,) = hip.hipDeviceEnablePeerAccess(dst.ordinal, 0)
        enabled = driver.is_success(err) or int(err) == int(hip.hipError_t.hipErrorPeerAccessAlreadyEnabled)
    with _state.lock:
        _state.peer[key] = enabled
    return enabled


@hookimpl
def memory_connection_impl(
    context_a: Any, device_a: HipDevice | None, context_b: Any, device_b: HipDevice | None
) -> MemoryConnection | None:
    if context_a is not context_b:
        # HIP itself has one address space per process, but pyoffload contexts own their
        # allocations: across contexts, take the generic answer.
        return None
    # Pinned host memory is allocated portable and mapped: every device reaches it directly.
    if device_a is None or device_b is None or device_a is device_b:
        return MemoryConnection.UNIFIED
    if _peer_enabled(device_a, device_b) and _peer_enabled(device_b, device_a):
        return MemoryConnection.UNIFIED
    # hipMemcpyPeer copies between any two devices of the runtime, staging if it must.
    return MemoryConnection.MIGRATABLE


# ------------------------------------------------------------------------------------------
# Programs and symbols
# ------------------------------------------------------------------------------------------


@hookimpl
def load_binary_impl(context: Any, device: HipDevice, image: bytes) -> HipProgram:
    code = codeobject.parse(image, device.arch)  # InvalidBinaryError before any driver call
    hip = _use(device)
    module = call(hip, hip.hipModuleLoadData, code.image, what="hipModuleLoadData")
    return HipProgram(device, module, code)


@hookimpl
def unload_binary_impl(device: HipDevice, program: HipProgram) -> None:
    hip = _use(device)
    call(hip, hip.hipModuleUnload, program.module)


@hookimpl
def global_init_fini_impl(device: HipDevice, program: HipProgram) -> InitFini | None:
    kernels = program.code.kernels
    return InitFini(
        init=tuple(n for n in (codeobject.INIT_KERNEL,) if n in kernels),
        fini=tuple(n for n in (codeobject.FINI_KERNEL,) if n in kernels),
    )


@hookimpl
def get_symbols_impl(device: HipDevice, program: HipProgram) -> Sequence[SymbolDesc]:
    code = program.code
    kernels = [SymbolDesc(name, SymbolKind.KERNEL) for name in sorted(code.kernels)]
    globals_ = [SymbolDesc(g.name, SymbolKind.GLOBAL, g.size) for g in sorted(code.globals.values(), key=lambda g: g.name)]
    return kernels + globals_


@hookimpl
def get_kernel_impl(device: HipDevice, program: HipProgram, name: str) -> HipKernel:
    hip = _use(device)
    function = call(hip, hip.hipModuleGetFunction, program.module, name, what=f"hipModuleGetFunction({name!r})")
    info = program.code.kernels.get(name) or codeobject.KernelInfo(name, (), 0, 8, 0, 1024)
    return HipKernel(program, function, info)


@hookimpl
def kernel_signature_impl(device: HipDevice, kernel: HipKernel) -> Sequence[str] | None:
    if kernel.info.name not in kernel.program.code.kernels:
        return None  # no metadata: nothing to check against
    return kernel.info.signature


@hookimpl
def get_global_impl(device: HipDevice, program: HipProgram, name: str) -> tuple[int, int]:
    hip = _use(device)
    ptr, size = call(hip, hip.hipModuleGetGlobal, program.module, name, what=f"hipModuleGetGlobal({name!r})")
    return int(ptr), int(size)


# ------------------------------------------------------------------------------------------
# Queues, launches and events
# ------------------------------------------------------------------------------------------


@hookimpl
def queue_create_impl(context: Any, device: HipDevice, profiling: bool) -> HipQueue:
    hip = _use(device)
    # Non-blocking: our queues must not serialise with the legacy null stream that the
    # synchronous operations use.
    stream = call(hip, hip.hipStreamCreateWithFlags, hip.hipStreamNonBlocking)
    return HipQueue(device, stream, profiling)


@hookimpl
def queue_destroy_impl(device: HipDevice, queue: HipQueue) -> None:
    hip = _use(device)
    call(hip, hip.hipStreamDestroy, queue.stream)
    queue.callbacks.clear()


def _raise_host_failures(failures: HostFunctionFailures | None) -> None:
    errors = failures.take() if failures is not None else []
    if errors:
        raise BackendError(f"a host function failed: {errors[0]!r}") from errors[0]


@hookimpl
def queue_synchronize_impl(device: HipDevice, queue: HipQueue) -> None:
    hip = _use(device)
    call(hip, hip.hipStreamSynchronize, queue.stream)
    # Every host function enqueued so far has returned: their ctypes trampolines can go.
    queue.callbacks.clear()
    _raise_host_failures(queue.failures)


@hookimpl
def queue_query_impl(device: HipDevice, queue: HipQueue) -> bool:
    hip = _use(device)
    (err,) = hip.hipStreamQuery(queue.stream)
    if int(err) == int(hip.hipError_t.hipErrorNotReady):
        return False
    if not driver.is_success(err):
        raise driver.error_for(hip, err, "hipStreamQuery")
    return True


def _launcher(device: HipDevice, queue: HipQueue | None, kernel: HipKernel,
              grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[Any, ...]) -> Callable[[], Any]:
    hip = _hip()
    packed = kernargs.pack(kernel.info, args, hip)
    stream = queue.stream if queue is not None else None

    def launch() -> Any:
        _use(device)
        call(
            hip, hip.hipModuleLaunchKernel, kernel.function,
            grid[0], grid[1], grid[2], block[0], block[1], block[2],
            packed.shared_mem_bytes, stream, None, packed.extra_address,
            what=f"hipModuleLaunchKernel({kernel.info.name!r})",
        )
        if queue is None:
            call(hip, hip.hipStreamSynchronize, None)
            return None
        return _record(device, queue)

    return launch


@hookimpl
def launch_impl(device: HipDevice, queue: HipQueue | None, kernel: HipKernel,
                grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[Any, ...]) -> Any:
    return _launcher(device, queue, kernel, grid, block, args)()


@hookimpl
def launch_prepare_impl(device: HipDevice, queue: HipQueue | None, kernel: HipKernel,
                        grid: tuple[int, int, int], block: tuple[int, int, int],
                        args: tuple[Any, ...]) -> Callable[[], Any] | None:
    # The kernarg buffer is packed once; HIP copies it at every launch.
    return _launcher(device, queue, kernel, grid, block, args)


@hookimpl
def enqueue_host_function_impl(device: HipDevice, queue: HipQueue, fn: Callable[[], None]) -> Any:
    failures = queue.failures

    def trampoline(_user_data: int | None) -> None:
        try:
            fn()
        except BaseException as exc:  # an exception must not unwind into the HIP runtime
            failures.add(exc)

    callback = _HOST_FN(trampoline)
    hip = _use(device)
    call(hip, hip.hipLaunchHostFunc, queue.stream, ctypes.cast(callback, ctypes.c_void_p).value, None)
    queue.callbacks.append(callback)
    return _record(device, queue, failures)


@hookimpl
def event_wait_impl(device: HipDevice, event: HipEvent) -> None:
    hip = _use(device)
    call(hip, hip.hipEventSynchronize, event.event)
    _raise_host_failures(event.failures)


@hookimpl
def event_query_impl(device: HipDevice, event: HipEvent) -> bool:
    hip = _use(device)
    (err,) = hip.hipEventQuery(event.event)
    if int(err) == int(hip.hipError_t.hipErrorNotReady):
        return False
    if not driver.is_success(err):
        raise driver.error_for(hip, err, "hipEventQuery")
    return True


@hookimpl
def event_elapsed_impl(device: HipDevice, start: HipEvent, end: HipEvent) -> float:
    if not (start.timing and end.timing):
        raise UnsupportedError("elapsed time needs events of a profiling queue")
    hip = _use(device)
    return float(call(hip, hip.hipEventElapsedTime, start.event, end.event))


# ------------------------------------------------------------------------------------------
# Conformance suite support
# ------------------------------------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: HipDevice) -> dict[str, bytes] | None:
    return conformance.images(device.arch)


@hookimpl
def known_failures_impl(device: HipDevice) -> dict[str, str] | None:
    return None
