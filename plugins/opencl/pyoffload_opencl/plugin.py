"""pyoffload's OpenCL backend: the ``*_impl`` hooks, over pyopencl.

Each hook is a thin adapter; the work lives in the modules named next to it.  pyopencl is
imported only inside hooks, so importing this module never fails on a machine without OpenCL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from pyoffload.backend import (
    AllocKind,
    DeviceDesc,
    DeviceType,
    InitFini,
    MemoryConnection,
    NoDevicesError,
    NotFoundError,
    PlatformDesc,
    SymbolDesc,
    SymbolKind,
    UnsupportedError,
    hookimpl,
)

from . import events, images, launch, signature, state, svm
from .errors import driver_call, translate
from .handles import SVM_FINE_GRAIN_SYSTEM, OclContext, OclDevice, OclKernel, OclProgram, OclQueue

# --------------------------------------------------------------------------------------------
# Lifecycle and devices
# --------------------------------------------------------------------------------------------

_DEVICES: list[OclDevice] = []


def _is_cl_error(exc: BaseException) -> bool:
    import pyopencl as cl

    return isinstance(exc, cl.Error)


def _device_type(cl_type: int) -> DeviceType:
    import pyopencl as cl

    if cl_type & cl.device_type.GPU:
        return DeviceType.GPU
    if cl_type & cl.device_type.CPU:
        return DeviceType.CPU
    return DeviceType.ACCELERATOR


def _make_device(cl_device: Any, platform_name: str, index: int) -> OclDevice:
    import pyopencl as cl

    def info(name: str, default: Any) -> Any:
        try:
            return cl_device.get_info(getattr(cl.device_info, name))
        except (cl.Error, AttributeError):
            return default

    return OclDevice(
        cl_device=cl_device,
        platform_name=platform_name,
        index=index,
        svm_caps=int(info("SVM_CAPABILITIES", 0)),
        address_bits=int(cl_device.address_bits),
        program_scope_globals=int(info("MAX_GLOBAL_VARIABLE_SIZE", 0)) > 0,
        il_version=str(info("IL_VERSION", "") or ""),
        max_alloc=int(cl_device.max_mem_alloc_size),
    )


def _short_name(platform: Any) -> str:
    """The implementation's own tag for device ids (``opencl-pocl-cpu-0``): the word after
    ``OpenCL <major.minor>`` in the platform version (``OpenCL 3.0 PoCL 3.1+debian ...``)."""
    words = str(platform.version).split()
    return words[2] if len(words) > 2 and words[0] == "OpenCL" else ""


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    try:
        import pyopencl as cl
    except Exception as exc:  # missing binding or libOpenCL
        raise NoDevicesError(f"pyopencl is not usable: {exc}") from exc
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise NoDevicesError(f"no OpenCL platform (ICD loader: {exc})") from exc
    result = []
    index = 0
    for platform in platforms:
        try:
            cl_devices = platform.get_devices()
        except cl.Error:
            continue  # a platform whose driver finds nothing: skip it, keep the others
        descs = []
        for cl_device in cl_devices:
            dev = _make_device(cl_device, platform.name, index)
            index += 1
            _DEVICES.append(dev)
            descs.append(DeviceDesc(str(cl_device.name), str(cl_device.vendor).strip(), _device_type(cl_device.type), dev))
        if descs:
            result.append(PlatformDesc(platform.name, platform.vendor, platform.version, tuple(descs), platform,
                                       short_name=_short_name(platform)))
    if not result:
        raise NoDevicesError(f"{len(platforms)} OpenCL platform(s), none with a device")
    return result


@hookimpl
def deinit_impl() -> None:
    svm.REGISTRY.clear()
    _DEVICES.clear()


@hookimpl
def device_info_impl(device: OclDevice) -> dict[str, Any]:
    import pyopencl as cl

    d = device.cl_device
    caps = device.svm_caps
    return {
        "memory_bytes": int(d.global_mem_size),
        "compute_units": int(d.max_compute_units),
        "architecture": str(d.name),
        "driver_version": str(d.driver_version),
        "max_work_group_size": int(d.max_work_group_size),
        "max_work_item_sizes": tuple(int(x) for x in d.max_work_item_sizes),
        "max_alloc_bytes": int(d.max_mem_alloc_size),
        "local_memory_bytes": int(d.local_mem_size),
        "address_bits": device.address_bits,
        "opencl_version": str(d.version),
        "opencl_c_version": str(d.opencl_c_version),
        "platform_version": str(d.platform.version),
        "svm_coarse_grain": bool(caps & cl.device_svm_capabilities.COARSE_GRAIN_BUFFER),
        "svm_fine_grain": bool(caps & cl.device_svm_capabilities.FINE_GRAIN_BUFFER),
        "svm_fine_grain_system": bool(caps & cl.device_svm_capabilities.FINE_GRAIN_SYSTEM),
        "svm_atomics": bool(caps & cl.device_svm_capabilities.ATOMICS),
        "program_scope_globals": device.program_scope_globals,
        "spir": "cl_khr_spir" in str(d.extensions).split(),
        "il_version": device.il_version,
        "extensions": " ".join(str(d.extensions).split()),
    }


# --------------------------------------------------------------------------------------------
# Contexts
# --------------------------------------------------------------------------------------------


@hookimpl
def context_create_impl(devices: Sequence[OclDevice]) -> OclContext:
    import pyopencl as cl

    with driver_call("creating an OpenCL context"):
        ctx = cl.Context([d.cl_device for d in devices])
    return OclContext(ctx, tuple(devices))


@hookimpl
def context_destroy_impl(context: OclContext) -> None:
    context.finish_all()
    context.internal_queues.clear()


# --------------------------------------------------------------------------------------------
# Memory (svm.py)
# --------------------------------------------------------------------------------------------


@hookimpl
def data_alloc_impl(context: OclContext, device: OclDevice | None, size: int, kind: AllocKind) -> int:
    return svm.allocate(context, device, size, kind)


@hookimpl
def data_free_impl(context: OclContext, device: OclDevice | None, ptr: int, kind: AllocKind) -> None:
    svm.release(context, ptr)


def _done(event: Any, sync: bool, queue: OclQueue | None) -> Any:
    if sync:
        event.wait()
        return None
    if queue is not None:
        queue.last_event = event
    return event


@hookimpl
def data_submit_impl(device: OclDevice, queue: OclQueue | None, dst: int, src: memoryview, size: int) -> Any:
    import pyopencl as cl

    cl_queue, sync = svm.queue_for(device, queue, dst)
    with driver_call("host-to-device SVM copy"):
        event = cl._cl._enqueue_svm_memcpy(cl_queue, 0, svm.svm_ref(dst, size), svm.host_ref(src, size), None, size)
    return _done(event, sync, queue)


@hookimpl
def data_retrieve_impl(device: OclDevice, queue: OclQueue | None, dst: memoryview, src: int, size: int) -> Any:
    import pyopencl as cl

    cl_queue, sync = svm.queue_for(device, queue, src)
    with driver_call("device-to-host SVM copy"):
        event = cl._cl._enqueue_svm_memcpy(cl_queue, 0, svm.host_ref(dst, size), svm.svm_ref(src, size), None, size)
    return _done(event, sync, queue)


@hookimpl
def data_exchange_impl(src_device: OclDevice, src: int, dst_device: OclDevice, dst: int, size: int, queue: OclQueue | None) -> Any:
    import pyopencl as cl

    src_ctx = svm.REGISTRY.context_of(src)
    dst_ctx = svm.REGISTRY.context_of(dst)
    if src_ctx is None or src_ctx is not dst_ctx or (queue is not None and queue.context is not dst_ctx):
        # SVM commands only take pointers of the queue's own context.
        raise UnsupportedError("no direct OpenCL path between two contexts")
    cl_queue, sync = svm.queue_for(dst_device, queue, dst)
    with driver_call("device-to-device SVM copy"):
        event = cl._cl._enqueue_svm_memcpy(cl_queue, 0, svm.svm_ref(dst, size), svm.svm_ref(src, size), None, size)
    return _done(event, sync, queue)


@hookimpl
def data_fill_impl(device: OclDevice, queue: OclQueue | None, ptr: int, pattern: bytes, size: int) -> Any:
    import pyopencl as cl

    n = len(pattern)
    # clEnqueueSVMMemFill: pattern size a power of two up to 128, destination aligned to it.
    if n > 128 or n & (n - 1) or ptr % n:
        raise UnsupportedError(f"clEnqueueSVMMemFill cannot fill a {n}-byte pattern at {ptr:#x}")
    cl_queue, sync = svm.queue_for(device, queue, ptr)
    with driver_call("SVM fill"):
        event = cl._cl._enqueue_svm_memfill(cl_queue, svm.svm_ref(ptr, size), bytearray(pattern), size, None)
    return _done(event, sync, queue)


@hookimpl
def data_lock_impl(device: OclDevice, ptr: int, size: int) -> int:
    # Only fine-grain *system* SVM lets a device use ordinary host memory at its own address;
    # OpenCL has no call that pins a host range and hands back a device pointer.
    if device.svm_caps & SVM_FINE_GRAIN_SYSTEM:
        return ptr
    raise UnsupportedError(
        f"OpenCL device {device.name!r} cannot use host memory it did not allocate "
        "(no fine-grain system SVM); allocate HOST memory instead"
    )


@hookimpl
def data_unlock_impl(device: OclDevice, ptr: int) -> None:
    return None  # system SVM needs no unpinning


@hookimpl
def memory_connection_impl(context_a: OclContext, device_a: OclDevice | None, context_b: OclContext, device_b: OclDevice | None) -> MemoryConnection:
    # An SVM pointer is valid on every device of its context and nowhere else.
    return MemoryConnection.UNIFIED if context_a is context_b else MemoryConnection.NONE


# --------------------------------------------------------------------------------------------
# Programs and symbols (images.py, state.py, signature.py)
# --------------------------------------------------------------------------------------------

_INIT_RE = re.compile(r"pyoffload_init(?:_(\d+))?")
_FINI_RE = re.compile(r"pyoffload_fini(?:_(\d+))?")
DEFAULT_PRIORITY = 65535  # as an unprioritised __attribute__((constructor))


def _make_kernel(program: OclProgram, name: str) -> OclKernel:
    import pyopencl as cl

    with driver_call(f"creating kernel {name!r}"):
        cl_kernel = cl.Kernel(program.cl_program, name)
    num_args = int(cl_kernel.num_args)
    names, kinds = signature.describe(cl_kernel, program.device.address_bits)
    # Without arg info (SPIR built without -cl-kernel-arg-info) there is no hidden parameter.
    index = signature.state_index(names, num_args)
    sig = None
    if kinds is not None:
        sig = tuple(kinds[:index] if index is not None else kinds)
    kernel = OclKernel(program, name, cl_kernel, index, num_args - (index is not None), sig)
    kernel.setters = launch._setters(cl_kernel)
    launch.set_state_arg(kernel, cl_kernel)
    return kernel


def _kernel(program: OclProgram, name: str) -> OclKernel:
    kernel = program.kernels.get(name)
    if kernel is None:
        if name not in program.kernel_names:
            raise NotFoundError(f"program has no kernel named {name!r}")
        kernel = program.kernels.setdefault(name, _make_kernel(program, name))
    return kernel


@hookimpl
def load_binary_impl(context: OclContext, device: OclDevice, image: bytes) -> OclProgram:
    cl_program, fmt = images.build(context, device, image)
    names = tuple(n for n in str(cl_program.kernel_names).split(";") if n)
    program = OclProgram(cl_program, context, device, fmt, names)

    def run_kernel(name: str, args: tuple[Any, ...]) -> None:
        with driver_call(f"running {name!r}"):
            launch.launch(None, _kernel(program, name), (1, 1, 1), (1, 1, 1), args)

    state.create(program, run_kernel)
    # Kernels made before the block existed get its address now.
    for kernel in program.kernels.values():
        launch.set_state_arg(kernel, kernel.cl_kernel)
    return program


@hookimpl
def unload_binary_impl(device: OclDevice, program: OclProgram) -> None:
    state.destroy(program)
    program.kernels.clear()
    program.cl_program = None


def _ordered(names: Sequence[str], pattern: re.Pattern[str], reverse: bool) -> tuple[str, ...]:
    found = []
    for name in names:
        m = pattern.fullmatch(name)
        if m:
            priority = int(m.group(1)) if m.group(1) is not None else DEFAULT_PRIORITY
            found.append((priority, name))
    found.sort(reverse=reverse)
    return tuple(name for _, name in found)


@hookimpl
def global_init_fini_impl(device: OclDevice, program: OclProgram) -> InitFini:
    # Constructors: lowest priority first; destructors: highest first (the reverse), after
    # LLVM's llvm.global_ctors / llvm.global_dtors.  Equal priorities go by name.
    return InitFini(
        init=_ordered(program.kernel_names, _INIT_RE, reverse=False),
        fini=_ordered(program.kernel_names, _FINI_RE, reverse=True),
    )


@hookimpl
def get_symbols_impl(device: OclDevice, program: OclProgram) -> Sequence[SymbolDesc]:
    symbols = [SymbolDesc(n, SymbolKind.KERNEL) for n in program.kernel_names]
    if program.state is not None:
        symbols += [SymbolDesc(n, SymbolKind.GLOBAL, size) for n, (_, size) in program.state.variables.items()]
    return symbols


@hookimpl
def get_kernel_impl(device: OclDevice, program: OclProgram, name: str) -> OclKernel:
    return _kernel(program, name)


@hookimpl
def kernel_signature_impl(device: OclDevice, kernel: OclKernel) -> Sequence[str] | None:
    return kernel.signature


@hookimpl
def get_global_impl(device: OclDevice, program: OclProgram, name: str) -> tuple[int, int]:
    block = program.state
    if block is not None and name in block.variables:
        offset, size = block.variables[name]
        return block.base + offset, size
    if name in program.kernel_names:
        raise NotFoundError(f"{name!r} is a kernel, not a global variable")
    raise NotFoundError(
        f"program has no global variable named {name!r} (OpenCL programs expose globals "
        "through the program state block; plain program-scope variables have no host address)"
    )


# --------------------------------------------------------------------------------------------
# Queues, launches, events (launch.py, events.py)
# --------------------------------------------------------------------------------------------


@hookimpl
def queue_create_impl(context: OclContext, device: OclDevice, profiling: bool) -> OclQueue:
    import pyopencl as cl

    props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
    with driver_call("creating a command queue"):
        cl_queue = cl.CommandQueue(context.cl_context, device.cl_device, properties=props)
    queue = OclQueue(cl_queue, context, device, profiling)
    context.queues.add(queue)
    return queue


@hookimpl
def queue_destroy_impl(device: OclDevice, queue: OclQueue) -> None:
    queue.cl_queue.finish()
    queue.context.queues.discard(queue)


@hookimpl
def queue_synchronize_impl(device: OclDevice, queue: OclQueue) -> None:
    with driver_call("waiting for a queue"):
        events.synchronize(queue)


@hookimpl
def queue_query_impl(device: OclDevice, queue: OclQueue) -> bool:
    return events.queue_idle(queue)


@hookimpl
def launch_impl(device: OclDevice, queue: OclQueue | None, kernel: OclKernel, grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[Any, ...]) -> Any:
    try:
        return launch.launch(queue, kernel, grid, block, args)
    except Exception as exc:  # hot path: no context manager on success
        if _is_cl_error(exc):
            raise translate(exc, f"launching {kernel.name!r}") from exc
        raise


@hookimpl
def launch_prepare_impl(device: OclDevice, queue: OclQueue | None, kernel: OclKernel, grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[Any, ...]) -> Callable[[], Any]:
    with driver_call(f"preparing {kernel.name!r}"):
        return launch.prepare(queue, kernel, grid, block, args)


@hookimpl
def enqueue_host_function_impl(device: OclDevice, queue: OclQueue | None, fn: Callable[[], None]) -> Any:
    if queue is None:
        fn()
        return None
    with driver_call("enqueueing a host function"):
        return events.enqueue_host_function(queue, fn)


@hookimpl
def event_wait_impl(device: OclDevice, event: Any) -> None:
    with driver_call("waiting for an event"):
        events.wait(event)


@hookimpl
def event_query_impl(device: OclDevice, event: Any) -> bool:
    return events.query(event)


@hookimpl
def event_elapsed_impl(device: OclDevice, start: Any, end: Any) -> float:
    return events.elapsed_ms(start, end)


# --------------------------------------------------------------------------------------------
# Conformance suite support
# --------------------------------------------------------------------------------------------

_CONFORMANCE: dict[str, bytes] = {}


@hookimpl
def conformance_images_impl(device: OclDevice) -> dict[str, bytes]:
    # OpenCL C source is this backend's portable image format: the driver builds it for
    # whichever device loads it.
    if not _CONFORMANCE:
        root = resources.files(__package__) / "conformance_src"
        for name in ("kernels", "ctor_dtor"):
            _CONFORMANCE[name] = (root / f"{name}.cl").read_bytes()
    return dict(_CONFORMANCE)


@hookimpl
def known_failures_impl(device: OclDevice) -> dict[str, str]:
    from .known_failures import known_failures

    return known_failures(device)
