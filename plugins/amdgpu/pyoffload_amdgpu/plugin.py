"""The AMDGPU backend: pyoffload's ``*_impl`` hooks (contract v1) over hip-python's ``hip.hip``.

Importing this module never touches HIP: the binding is loaded in :func:`init_impl`, which reports
``NoDevicesError`` with the driver's reason when hip-python, the HIP runtime
(``libamdhip64.so``) or a GPU is missing.  ``PYOFFLOAD_AMDGPU_DRIVER=fake`` swaps in the fake
driver of :mod:`pyoffload_amdgpu.fake_hip`, which runs the same code paths without a GPU.

HIP allocates, loads modules and creates streams and events on the calling thread's *current
device*, so the hooks that create something first call ``hipSetDevice`` (a thread-local store);
work on a stream runs on the stream's device, so the enqueue hooks need none.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import threading
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

HOOK_API = (1, 2)  # the version of pyoffload's hook contract this backend implements

__all__ = ["HOOK_API"]

# The backend's handles: plain records compared by identity.  Event handles are the hipEvent_t.


@dataclasses.dataclass(eq=False)
class HipDevice:
    ordinal: int
    name: str
    arch: str  # e.g. "gfx90a", without target features
    info: dict[str, Any]  # device_info_impl's answer
    memory_pools: bool  # hipMallocAsync is available


@dataclasses.dataclass(eq=False)
class HipQueue:
    stream: Any  # hipStream_t, or the int address a borrowed queue was made from
    profiling: bool
    borrowed: bool = False  # made by queue_from_native_impl: the owner destroys the stream


@dataclasses.dataclass(eq=False)
class HipProgram:
    module: Any
    code: codeobject.CodeObject


@dataclasses.dataclass(eq=False)
class HipKernel:
    function: Any
    info: codeobject.KernelInfo


class _State:
    """The loaded binding and what init learned; one per initialised runtime."""

    def __init__(self, hip: Any) -> None:
        self.hip = hip
        self.async_allocations: set[int] = set()  # pointers from hipMallocAsync
        self.events: set[Any] = set()  # hipEvent_t recorded and not released: destroyed at deinit
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


# -- lifecycle and devices ------------------------------------------------------------------


def _query_device(hip: Any, ordinal: int, driver_version: int, runtime_version: int) -> HipDevice:
    props = call(hip, hip.hipGetDeviceProperties, ordinal)
    gcn_arch_name = str(props.gcnArchName) or "unknown"
    arch = codeobject.arch_name(gcn_arch_name)
    info = {
        "driver_version": str(driver_version),
        "compute_units": int(props.multiProcessorCount),
        "max_work_group_size": int(props.maxThreadsPerBlock),
        "max_work_item_sizes": tuple(int(v) for v in props.maxThreadsDim),
        "max_grid_size": tuple(int(v) for v in props.maxGridSize),
        "global_memory_bytes": int(props.totalGlobalMem),
        "local_memory_bytes": int(props.sharedMemPerBlock),
        "max_alloc_bytes": int(props.totalGlobalMem),  # HIP has no smaller per-allocation limit
        "clock_mhz": int(props.clockRate) // 1000,
        "sub_group_size": int(props.warpSize),
        "address_bits": 64,
        "memory_kinds": ("DEVICE", "HOST", "MANAGED") if props.managedMemory else ("DEVICE", "HOST"),
        "amdgpu.architecture": arch,
        "amdgpu.gcn_arch_name": gcn_arch_name,
        "amdgpu.runtime_version": int(runtime_version),
        "amdgpu.pci_bus_id": int(props.pciBusID),
        "amdgpu.ordinal": ordinal,
    }
    name = str(props.name) or f"AMD GPU {ordinal}"
    return HipDevice(ordinal, name, arch, info, bool(props.memoryPoolsSupported))


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
    _state = _State(hip)
    descs = tuple(DeviceDesc(d.name, "AMD", DeviceType.GPU, d) for d in devices)
    return [PlatformDesc("AMD HIP", "AMD", f"HIP {runtime_version}", descs, short_name="hip")]


@hookimpl
def deinit_impl() -> None:
    global _state
    state, _state = _state, None
    if state is None:
        return
    with state.lock:
        events, state.events = state.events, set()
    for event in events:  # still owned by Event objects the application keeps
        state.hip.hipEventDestroy(event)
    driver.release_binding(state.hip)


@hookimpl
def compile_impl(device: HipDevice, source: str, options: tuple[str, ...]) -> bytes:
    # OpenCL C for the device's processor, through clang and ld.lld (no ROCm device library)
    return conformance.build(source, device.arch, options=options)


@hookimpl
def compiler_id_impl(device: HipDevice) -> str | None:
    ident = conformance.compiler_id()
    return None if ident is None else f"{ident} -mcpu={device.arch}"


# Build targets ("amdgpu:gfx90a"): OpenCL C to a code object with clang and ld.lld, no GPU.


@hookimpl
def build_target_impl(device: HipDevice) -> str:
    return f"amdgpu:{device.arch}"


@hookimpl
def target_compiler_id_impl(target: str, compiler: str | None) -> str:
    arch, tools = conformance.target_tools(target, compiler)
    return f"{conformance.identify(tools[0])} -mcpu={arch}"


@hookimpl
def target_compile_impl(target: str, source: str, options: tuple[str, ...], compiler: str | None) -> bytes:
    arch, tools = conformance.target_tools(target, compiler)
    return conformance.build(source, arch, tools, options)


@hookimpl
def target_link_impl(target: str, sources: tuple[str, ...], options: tuple[str, ...], compiler: str | None) -> bytes:
    # clang -c per source into a relocatable amdgcn object, then ld.lld -shared -z defs
    arch, tools = conformance.target_tools(target, compiler)
    return conformance.link(sources, arch, tools, options)


@hookimpl
def device_info_impl(device: HipDevice) -> dict[str, Any]:
    # kDLROCM, kDLROCMHost; DLPack has no ROCm managed type: managed memory is device memory there
    return dict(device.info, dlpack_device_types={"DEVICE": 10, "HOST": 11, "MANAGED": 10})


_NATIVE: dict[str, Callable[[Any], Any]] = {
    "device": lambda d: d.ordinal,
    "queue": lambda q: int(q.stream),
    "program": lambda p: p.module,
    "kernel": lambda k: k.function,
}  # an event handle is the hipEvent_t itself


@hookimpl
def native_handle_impl(kind: str, handle: Any) -> Any:
    return _NATIVE[kind](handle) if kind in _NATIVE else None


# -- memory -----------------------------------------------------------------------------------


@hookimpl
def data_alloc_impl(context: Any, device: HipDevice | None, size: int, kind: AllocKind) -> int:
    if device is None:  # HOST: portable (pinned for every device) and mapped (device-visible)
        hip = _hip()
        return int(call(hip, hip.hipHostMalloc, size, hip.hipHostMallocPortable | hip.hipHostMallocMapped))
    hip = _use(device)
    if kind is AllocKind.DEVICE:
        return int(call(hip, hip.hipMalloc, size))
    return int(call(hip, hip.hipMallocManaged, size, hip.hipMemAttachGlobal))


@hookimpl
def data_free_impl(context: Any, device: HipDevice | None, ptr: int, kind: AllocKind) -> None:
    hip = _hip()
    call(hip, hip.hipHostFree if kind is AllocKind.HOST else hip.hipFree, ptr)


@hookimpl
def data_alloc_async_impl(
    context: Any, device: HipDevice | None, queue: HipQueue, size: int, kind: AllocKind
) -> int | None:
    # HIP's stream-ordered allocator serves device memory only.
    if kind is not AllocKind.DEVICE or device is None or not device.memory_pools:
        return None
    hip = _hip()
    ptr = int(call(hip, hip.hipMallocAsync, size, queue.stream))
    assert _state is not None
    with _state.lock:
        _state.async_allocations.add(ptr)
    return ptr


@hookimpl
def data_free_async_impl(
    context: Any, device: HipDevice | None, queue: HipQueue, ptr: int, kind: AllocKind
) -> bool | None:
    assert _state is not None
    with _state.lock:
        if ptr not in _state.async_allocations:
            return None
    call(_state.hip, _state.hip.hipFreeAsync, ptr, queue.stream)
    with _state.lock:
        _state.async_allocations.discard(ptr)
    return True


@hookimpl
def data_submit_impl(device: HipDevice, queue: HipQueue, dst: int, src: memoryview, size: int) -> None:
    hip = _state.hip  # type: ignore[union-attr]  # as in launch_impl: one frame on a synchronous copy's path
    err = hip.hipMemcpyAsync(dst, src, size, hip.hipMemcpyKind.hipMemcpyHostToDevice, queue.stream)[0]
    if err:
        raise driver.error_for(hip, err, "hipMemcpyAsync")


@hookimpl
def data_retrieve_impl(device: HipDevice, queue: HipQueue, dst: memoryview, src: int, size: int) -> None:
    hip = _state.hip  # type: ignore[union-attr]
    err = hip.hipMemcpyAsync(dst, src, size, hip.hipMemcpyKind.hipMemcpyDeviceToHost, queue.stream)[0]
    if err:
        raise driver.error_for(hip, err, "hipMemcpyAsync")


@hookimpl
def data_exchange_impl(
    src_device: HipDevice, src: int, dst_device: HipDevice, dst: int, size: int, queue: HipQueue
) -> None:
    hip = _hip()
    if src_device is dst_device:  # unified addressing: the runtime works out the direction
        call(hip, hip.hipMemcpyAsync, dst, src, size, hip.hipMemcpyKind.hipMemcpyDefault, queue.stream)
    else:
        call(hip, hip.hipMemcpyPeerAsync, dst, dst_device.ordinal, src, src_device.ordinal, size, queue.stream)


@hookimpl
def memcpy_rect_impl(
    device: HipDevice,
    queue: HipQueue,
    dst: int | memoryview,
    dst_pitch: int,
    dst_slice_pitch: int,
    src: int | memoryview,
    src_pitch: int,
    src_slice_pitch: int,
    width: int,
    height: int,
    depth: int,
) -> None:
    if depth != 1:  # hipMemcpy3DAsync takes hipMemcpy3DParms structures: the generic layer goes row by row
        raise UnsupportedError("3D copies go row by row on this backend")
    hip = _hip()
    kinds = hip.hipMemcpyKind
    if isinstance(src, memoryview):
        kind = kinds.hipMemcpyHostToDevice
    elif isinstance(dst, memoryview):
        kind = kinds.hipMemcpyDeviceToHost
    else:
        kind = kinds.hipMemcpyDeviceToDevice
    call(hip, hip.hipMemcpy2DAsync, dst, dst_pitch, src, src_pitch, width, height, kind, queue.stream)


@hookimpl
def memfill_rect_impl(
    device: HipDevice, queue: HipQueue, ptr: int, pitch: int, pattern: bytes, width: int, height: int
) -> None:
    if len(pattern) != 1:
        raise UnsupportedError("hipMemset2DAsync sets bytes only")
    hip = _hip()
    call(hip, hip.hipMemset2DAsync, ptr, pitch, pattern[0], width, height, queue.stream)


@hookimpl
def data_fill_impl(device: HipDevice, queue: HipQueue, ptr: int, pattern: bytes, size: int) -> None:
    hip = _hip()
    width = len(pattern)  # the generic layer narrowed it to its shortest repeating unit
    setter = {1: hip.hipMemsetD8Async, 2: hip.hipMemsetD16Async, 4: hip.hipMemsetD32Async}.get(width)
    if setter is None or ptr % width:
        raise UnsupportedError(f"HIP has no memset for a {width}-byte pattern at this alignment")
    call(hip, setter, ptr, int.from_bytes(pattern, "little"), size // width, queue.stream)


@hookimpl
def data_lock_impl(device: HipDevice, ptr: int, size: int) -> int:
    hip = _hip()
    call(hip, hip.hipHostRegister, ptr, size, hip.hipHostRegisterMapped | hip.hipHostRegisterPortable)
    try:
        return int(call(hip, hip.hipHostGetDevicePointer, ptr, 0))
    except BaseException:
        hip.hipHostUnregister(ptr)
        raise


@hookimpl
def data_unlock_impl(device: HipDevice, ptr: int) -> None:
    hip = _hip()
    call(hip, hip.hipHostUnregister, ptr)


@hookimpl
def data_pinned_info_impl(device: HipDevice, ptr: int) -> tuple[int, int, int] | None:
    hip = _hip()
    err, attributes = hip.hipPointerGetAttributes(ptr)
    # Pageable memory is an error on older runtimes and "unregistered" on newer ones.
    if not driver.is_success(err) or int(attributes.type) != int(hip.hipMemoryType.hipMemoryTypeHost):
        return None
    err, base, size = hip.hipMemGetAddressRange(ptr)
    if not driver.is_success(err):
        return None
    return int(base), int(size), int(call(hip, hip.hipHostGetDevicePointer, int(base), 0))


@hookimpl
def data_prefetch_impl(device: HipDevice, queue: HipQueue, ptr: int, size: int, to_device: bool) -> None:
    hip = _hip()
    target = device.ordinal if to_device else hip.hipCpuDeviceId
    call(hip, hip.hipMemPrefetchAsync, ptr, size, target, queue.stream)


# SET_READ_MOSTLY -> hipMemAdviseSetReadMostly, and so on for every MemAdvice.
_ADVICE = {a: "hipMemAdvise" + a.name.title().replace("_", "") for a in MemAdvice}


@hookimpl
def data_advise_impl(device: HipDevice, ptr: int, size: int, advice: MemAdvice) -> None:
    hip = _hip()
    call(hip, hip.hipMemAdvise, ptr, size, getattr(hip.hipMemoryAdvise, _ADVICE[advice]), device.ordinal)


def _enable_peer(src: HipDevice, dst: HipDevice) -> bool:
    """Let ``src`` access ``dst``'s memory if the hardware can."""
    hip = _use(src)
    if not call(hip, hip.hipDeviceCanAccessPeer, src.ordinal, dst.ordinal):
        return False
    (err,) = hip.hipDeviceEnablePeerAccess(dst.ordinal, 0)
    return driver.is_success(err) or int(err) == int(hip.hipError_t.hipErrorPeerAccessAlreadyEnabled)


@hookimpl
def memory_connection_impl(
    context_a: Any, device_a: HipDevice | None, context_b: Any, device_b: HipDevice | None
) -> MemoryConnection | None:
    if context_a is not context_b:
        return None  # one address space per process, but pyoffload contexts own their memory
    # HOST memory is allocated portable and mapped: every device reaches it directly.
    if device_a is None or device_b is None or device_a is device_b:
        return MemoryConnection.UNIFIED
    if _enable_peer(device_a, device_b) and _enable_peer(device_b, device_a):
        return MemoryConnection.UNIFIED
    return MemoryConnection.MIGRATABLE  # hipMemcpyPeerAsync copies between any two devices


# -- programs and kernels -------------------------------------------------------------------


@hookimpl
def load_binary_impl(context: Any, device: HipDevice, image: bytes) -> HipProgram:
    code = codeobject.parse(image, device.arch)  # InvalidBinaryError before any driver call
    hip = _use(device)
    return HipProgram(call(hip, hip.hipModuleLoadData, code.image), code)


@hookimpl
def unload_binary_impl(device: HipDevice, program: HipProgram) -> None:
    hip = _hip()
    call(hip, hip.hipModuleUnload, program.module)


@hookimpl
def global_init_fini_impl(device: HipDevice, program: HipProgram) -> InitFini:
    kernels = program.code.kernels
    return InitFini(
        init=tuple(n for n in (codeobject.INIT_KERNEL,) if n in kernels),
        fini=tuple(n for n in (codeobject.FINI_KERNEL,) if n in kernels),
    )


@hookimpl
def get_symbols_impl(device: HipDevice, program: HipProgram) -> Sequence[SymbolDesc]:
    code = program.code
    return [SymbolDesc(name, SymbolKind.KERNEL) for name in sorted(code.kernels)] + [
        SymbolDesc(g.name, SymbolKind.GLOBAL, g.size) for _, g in sorted(code.globals.items())
    ]


@hookimpl
def get_kernel_impl(device: HipDevice, program: HipProgram, name: str) -> HipKernel:
    hip = _hip()
    function = call(hip, hip.hipModuleGetFunction, program.module, name, what=f"hipModuleGetFunction({name!r})")
    return HipKernel(function, program.code.kernels[name])


@hookimpl
def get_global_impl(device: HipDevice, program: HipProgram, name: str) -> tuple[int, int]:
    hip = _hip()
    ptr, size = call(hip, hip.hipModuleGetGlobal, program.module, name, what=f"hipModuleGetGlobal({name!r})")
    return int(ptr), int(size)


@hookimpl
def kernel_signature_impl(device: HipDevice, kernel: HipKernel) -> Sequence[str] | None:
    return kernel.info.signature


@hookimpl
def kernel_attributes_impl(device: HipDevice, kernel: HipKernel) -> dict[str, Any] | None:
    info = kernel.info
    if not info.described:
        return None
    return {
        "max_work_group_size": min(info.max_flat_workgroup_size, device.info["max_work_group_size"]),
        "preferred_work_group_multiple": info.wavefront_size,
        "local_memory_bytes": info.group_segment_size,
        "private_memory_bytes": info.private_segment_size,
        "registers": info.vgpr_count,  # per work-item; SGPRs are per wavefront
        "amdgpu.sgpr_count": info.sgpr_count,
        "required_work_group_size": info.reqd_workgroup_size,
    }


@hookimpl
def kernel_packer_impl(
    device: HipDevice, kernel: HipKernel, kinds: tuple[str, ...]
) -> Callable[[tuple[Any, ...]], kernargs.Packed]:
    return kernargs.packer(kernel.info, kinds)


# The two launch hooks are the hot path: no helper calls, the error checked inline.


@hookimpl
def launch_impl(
    device: HipDevice,
    queue: HipQueue,
    kernel: HipKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: kernargs.Packed,
) -> None:
    hip = _state.hip  # type: ignore[union-attr]  # the generic layer enqueues only while initialised
    frame, shared = args
    err = hip.hipModuleLaunchKernel(
        kernel.function, *grid, *block, shared, queue.stream, None, ctypes.addressof(frame)
    )[0]
    if err:
        raise driver.error_for(hip, err, f"hipModuleLaunchKernel({kernel.info.name!r})")


@hookimpl
def launch_prepare_impl(
    device: HipDevice,
    queue: HipQueue,
    kernel: HipKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: kernargs.Packed,
) -> Callable[[], None]:
    hip = _hip()
    frame, shared = args
    launch = hip.hipModuleLaunchKernel
    bound = (kernel.function, *grid, *block, shared, queue.stream, None, ctypes.addressof(frame))

    def enqueue(frame: Any = frame) -> None:  # the frame lives as long as the prepared launch
        err = launch(*bound)[0]  # HIP copies the kernarg bytes at every launch
        if err:
            raise driver.error_for(hip, err, f"hipModuleLaunchKernel({kernel.info.name!r})")

    return enqueue


# -- queues, host functions and events ------------------------------------------------------


@hookimpl
def queue_create_impl(context: Any, device: HipDevice, profiling: bool) -> HipQueue:
    hip = _use(device)
    # Non-blocking: a queue must not serialise with the legacy null stream of other libraries.
    return HipQueue(call(hip, hip.hipStreamCreateWithFlags, hip.hipStreamNonBlocking), profiling)


@hookimpl
def queue_from_native_impl(context: Any, device: HipDevice, native: Any, profiling: bool) -> HipQueue:
    return HipQueue(native, profiling, borrowed=True)


@hookimpl
def queue_destroy_impl(device: HipDevice, queue: HipQueue) -> None:
    if not queue.borrowed:
        hip = _hip()
        call(hip, hip.hipStreamDestroy, queue.stream)


@hookimpl
def queue_synchronize_impl(device: HipDevice, queue: HipQueue) -> None:
    hip = _state.hip  # type: ignore[union-attr]
    err = hip.hipStreamSynchronize(queue.stream)[0]
    if err:
        raise driver.error_for(hip, err, "hipStreamSynchronize")


def _ready(hip: Any, err: Any, what: str) -> bool:
    if int(err) == int(hip.hipError_t.hipErrorNotReady):
        return False
    if not driver.is_success(err):
        raise driver.error_for(hip, err, what)
    return True


@hookimpl
def queue_query_impl(device: HipDevice, queue: HipQueue) -> bool:
    hip = _hip()
    return _ready(hip, hip.hipStreamQuery(queue.stream)[0], "hipStreamQuery")


_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # hipHostFn_t: void (*)(void *userData)
_host_functions: dict[int, Callable[[], None]] = {}
_host_keys = itertools.count(1)  # userData keys: 0 would arrive as NULL


def _host_trampoline(key: int) -> None:
    # HIP's callback thread must make no HIP call, and the function may call any pyoffload API:
    # it runs on a thread of its own while this callback holds the stream's later work back.
    runner = threading.Thread(target=_host_functions.pop(key), name="pyoffload-amdgpu-host-function")
    runner.start()
    runner.join()


_TRAMPOLINE = _HOST_FN(_host_trampoline)  # module-level: alive as long as any stream may call it


@hookimpl
def enqueue_host_function_impl(device: HipDevice, queue: HipQueue, fn: Callable[[], None]) -> bool:
    hip = _hip()
    key = next(_host_keys)
    _host_functions[key] = fn  # fn never raises: the generic layer records the user's exception
    try:
        call(hip, hip.hipLaunchHostFunc, queue.stream, ctypes.cast(_TRAMPOLINE, ctypes.c_void_p).value, key)
    except BaseException:
        del _host_functions[key]
        raise
    return True


@hookimpl
def queue_wait_events_impl(device: HipDevice, queue: HipQueue, events: Sequence[Any]) -> bool:
    hip = _hip()
    for event in events:  # HIP events order streams of any device of the process
        call(hip, hip.hipStreamWaitEvent, queue.stream, event, 0)
    return True


@hookimpl
def event_record_impl(device: HipDevice, queue: HipQueue) -> Any:
    hip = _use(device)  # an event belongs to the current device and records only on its streams
    flags = hip.hipEventDefault if queue.profiling else hip.hipEventDisableTiming
    event = call(hip, hip.hipEventCreateWithFlags, flags)
    try:
        call(hip, hip.hipEventRecord, event, queue.stream)
    except BaseException:
        hip.hipEventDestroy(event)
        raise
    with _state.lock:  # type: ignore[union-attr]
        _state.events.add(event)  # type: ignore[union-attr]
    return event


@hookimpl
def event_release_impl(device: HipDevice, event: Any) -> bool:
    state = _state
    if state is None:
        return True  # deinit destroyed it
    with state.lock:
        if event not in state.events:
            return True
        state.events.discard(event)
    call(state.hip, state.hip.hipEventDestroy, event)
    return True  # an answer, so that the generic default is not called as well


@hookimpl
def event_wait_impl(device: HipDevice, event: Any) -> None:
    hip = _hip()
    call(hip, hip.hipEventSynchronize, event)


@hookimpl
def event_query_impl(device: HipDevice, event: Any) -> bool:
    hip = _hip()
    return _ready(hip, hip.hipEventQuery(event)[0], "hipEventQuery")


@hookimpl
def event_elapsed_impl(device: HipDevice, start: Any, end: Any) -> float:
    hip = _hip()
    return float(call(hip, hip.hipEventElapsedTime, start, end))


# -- conformance suite ------------------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: HipDevice) -> dict[str, bytes] | None:
    return conformance.images(device.arch)
