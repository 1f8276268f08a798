"""pyoffload's OpenCL backend: the ``*_impl`` hooks of contract v1, over pyopencl.

Each hook is a thin adapter over one OpenCL call; memory is in :mod:`.svm`, images in
:mod:`.images`, the program state block in :mod:`.state`, kernels in :mod:`.launch`.  pyopencl
is imported only inside hooks, so importing this module never fails on a machine without
OpenCL.  Every enqueue records the command's event as the queue's ``last``, which is all
``queue_query_impl`` and ``queue_synchronize_impl`` need to report completion and failures.
"""

from __future__ import annotations

import operator
import re
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
    SymbolKind,
    UnsupportedError,
    hookimpl,
)

from . import images, launch, state, svm
from .errors import check_status, driver_call, translate
from .handles import SVM_FINE_GRAIN_SYSTEM, OclContext, OclDevice, OclEvent, OclKernel, OclProgram, OclQueue

HOOK_API = (1, 2)  # the version of pyoffload's hook contract this backend implements

__all__ = ["HOOK_API"]

_new = object.__new__

# -- lifecycle and devices ----------------------------------------------------------------


def _device_type(cl_type: int) -> DeviceType:
    import pyopencl as cl

    if cl_type & cl.device_type.GPU:
        return DeviceType.GPU
    return DeviceType.CPU if cl_type & cl.device_type.CPU else DeviceType.ACCELERATOR


def _make_device(cl_device: Any) -> OclDevice:
    import pyopencl as cl

    def info(name: str, default: Any) -> Any:
        try:
            return cl_device.get_info(getattr(cl.device_info, name))
        except (cl.Error, AttributeError):
            return default

    svm_caps = int(info("SVM_CAPABILITIES", 0))
    cpu = bool(int(cl_device.type) & cl.device_type.CPU)
    return OclDevice(
        cl_device,
        svm_caps,
        int(cl_device.address_bits),
        int(info("MAX_GLOBAL_VARIABLE_SIZE", 0)) > 0,
        str(info("IL_VERSION", "") or ""),
        svm.host_addressable_kinds(svm_caps, cpu, bool(info("HOST_UNIFIED_MEMORY", False))),
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
    for platform in platforms:
        try:
            cl_devices = platform.get_devices()
        except cl.Error:
            continue  # a platform whose driver finds nothing: skip it, keep the others
        descs = tuple(
            DeviceDesc(str(d.name), str(d.vendor).strip(), _device_type(d.type), _make_device(d)) for d in cl_devices
        )
        if descs:
            result.append(
                PlatformDesc(
                    platform.name, platform.vendor, platform.version, descs, platform, short_name=_short_name(platform)
                )
            )
    if not result:
        raise NoDevicesError(f"{len(platforms)} OpenCL platform(s), none with a device")
    return result


@hookimpl
def deinit_impl() -> None:
    return None  # pyopencl releases the driver's objects with their Python wrappers


@hookimpl
def device_info_impl(device: OclDevice) -> dict[str, Any]:
    d = device.cl_device
    return {
        "driver_version": str(d.driver_version),
        "compute_units": int(d.max_compute_units),
        "max_work_group_size": int(d.max_work_group_size),
        "max_work_item_sizes": tuple(int(x) for x in d.max_work_item_sizes)[:3],
        "max_grid_size": ((1 << device.address_bits) - 1,) * 3,  # the global size is a size_t
        "global_memory_bytes": int(d.global_mem_size),
        "local_memory_bytes": int(d.local_mem_size),
        "max_alloc_bytes": int(d.max_mem_alloc_size),
        "clock_mhz": int(d.max_clock_frequency),
        "address_bits": device.address_bits,
        "memory_kinds": svm.memory_kinds(device.svm_caps),
        "host_addressable_kinds": device.host_kinds,
        "dlpack_device_types": {"DEVICE": 4},  # kDLOpenCL; fine-grain SVM (HOST, MANAGED) is the host's: kDLCPU
        "opencl.version": str(d.version),
        "opencl.c_version": str(d.opencl_c_version),
        "opencl.platform_version": str(d.platform.version),
        "opencl.svm_capabilities": device.svm_caps,
        "opencl.program_scope_globals": device.program_scope_globals,
        "opencl.il_version": device.il_version,
        "opencl.extensions": " ".join(str(d.extensions).split()),
    }


@hookimpl
def context_create_impl(devices: Sequence[OclDevice]) -> OclContext:
    import pyopencl as cl

    with driver_call("creating an OpenCL context"):
        return OclContext(cl.Context([d.cl_device for d in devices]), tuple(devices))


_NATIVE = {
    "device": "cl_device",
    "context": "cl_context",
    "program": "cl_program",
    "kernel": "cl_kernel",
    "event": "cl_event",
}


@hookimpl
def native_handle_impl(kind: str, handle: Any) -> Any:
    if kind == "queue":
        return int(handle.cl_queue.int_ptr)  # the cl_command_queue
    return getattr(handle, _NATIVE[kind])  # the pyopencl object


@hookimpl
def queue_from_native_impl(context: OclContext, device: OclDevice, native: Any, profiling: bool) -> OclQueue:
    import pyopencl as cl

    # A raw cl_command_queue is retained here and released with the wrapper: borrowed, not owned.
    cq = native if isinstance(native, cl.CommandQueue) else cl.CommandQueue.from_int_ptr(operator.index(native))
    if cq.context != context.cl_context or cq.device != device.cl_device:
        raise InvalidArgumentError("the command queue belongs to another OpenCL context or device")
    props = cl.command_queue_properties
    if cq.properties & props.OUT_OF_ORDER_EXEC_MODE_ENABLE:
        raise UnsupportedError("an out-of-order command queue cannot be a pyoffload queue (queues are in order)")
    if profiling and not cq.properties & props.PROFILING_ENABLE:
        raise UnsupportedError("profiling asked for, but the command queue was created without PROFILING_ENABLE")
    return OclQueue(cq, context)


# -- memory (svm.py) ----------------------------------------------------------------------


@hookimpl
def data_alloc_impl(context: OclContext, device: OclDevice | None, size: int, kind: AllocKind) -> int:
    return svm.allocate(context, size, kind)


@hookimpl
def data_free_impl(context: OclContext, device: OclDevice | None, ptr: int, kind: AllocKind) -> None:
    svm.release(context, ptr)


# The copy hooks are on the synchronous copy's hot path: each enqueues without a helper frame
# (svm.tag runs on a cache miss only).  A device range is named by its context's cached tag; a
# writable host view is handed to pyopencl as it is (``cl.SVM`` takes any writable buffer), a
# read-only one (pyopencl insists on a writable buffer) through a tag at its address.


@hookimpl
def data_submit_impl(device: OclDevice, queue: OclQueue, dst: int, src: memoryview, size: int) -> None:
    import pyopencl as cl

    ref = queue.context.svm_tags.get((dst, size)) or svm.tag(queue.context.svm_tags, dst, size)
    try:
        host = (
            cl.SVM(src)
            if not src.readonly
            else svm.svm_ref(np.frombuffer(src, np.uint8, size).__array_interface__["data"][0], size)
        )
        queue.last = cl._cl._enqueue_svm_memcpy(queue.cl_queue, 0, ref, host, None, size)
    except cl.Error as exc:
        raise translate(exc, f"copying {size} bytes to {dst:#x}") from exc


@hookimpl
def data_retrieve_impl(device: OclDevice, queue: OclQueue, dst: memoryview, src: int, size: int) -> None:
    import pyopencl as cl

    ref = queue.context.svm_tags.get((src, size)) or svm.tag(queue.context.svm_tags, src, size)
    try:
        queue.last = cl._cl._enqueue_svm_memcpy(queue.cl_queue, 0, cl.SVM(dst), ref, None, size)
    except cl.Error as exc:
        raise translate(exc, f"copying {size} bytes from {src:#x}") from exc


@hookimpl
def data_exchange_impl(
    src_device: OclDevice, src: int, dst_device: OclDevice, dst: int, size: int, queue: OclQueue
) -> None:
    import pyopencl as cl

    if src < dst + size and dst < src + size:
        raise UnsupportedError("clEnqueueSVMMemcpy cannot copy overlapping ranges")
    tags = queue.context.svm_tags
    to = tags.get((dst, size)) or svm.tag(tags, dst, size)
    frm = tags.get((src, size)) or svm.tag(tags, src, size)
    try:
        queue.last = cl._cl._enqueue_svm_memcpy(queue.cl_queue, 0, to, frm, None, size)
    except cl.Error as exc:
        raise translate(exc, f"copying {size} bytes from {src:#x} to {dst:#x}") from exc


@hookimpl
def data_fill_impl(device: OclDevice, queue: OclQueue, ptr: int, pattern: bytes, size: int) -> None:
    import pyopencl as cl

    n = len(pattern)
    # clEnqueueSVMMemFill: pattern size a power of two up to 128, destination aligned to it.
    if n > 128 or n & (n - 1) or ptr % n:
        raise UnsupportedError(f"clEnqueueSVMMemFill cannot fill a {n}-byte pattern at {ptr:#x}")
    with driver_call("SVM fill"):
        queue.last = cl._cl._enqueue_svm_memfill(queue.cl_queue, svm.svm_ref(ptr, size), bytearray(pattern), size, None)


@hookimpl
def data_prefetch_impl(device: OclDevice, queue: OclQueue, ptr: int, size: int, to_device: bool) -> None:
    import pyopencl as cl

    flags = 0 if to_device else cl.mem_migration_flags.HOST
    with driver_call("SVM migration"):
        queue.last = cl._cl._enqueue_svm_migrate_mem(queue.cl_queue, [svm.svm_ref(ptr, size)], flags, None)


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
def memory_connection_impl(
    context_a: OclContext, device_a: OclDevice | None, context_b: OclContext, device_b: OclDevice | None
) -> MemoryConnection:
    # An SVM pointer is valid on every device of its context and nowhere else.
    return MemoryConnection.UNIFIED if context_a is context_b else MemoryConnection.NONE


# -- programs (images.py, state.py) -------------------------------------------------------

_INIT_RE = re.compile(r"pyoffload_init(?:_(\d+))?")
_FINI_RE = re.compile(r"pyoffload_fini(?:_(\d+))?")
DEFAULT_PRIORITY = 65535  # as an unprioritised __attribute__((constructor))


@hookimpl
def load_binary_impl(context: OclContext, device: OclDevice, image: bytes) -> OclProgram:
    with driver_call("building an OpenCL program"):
        cl_program = images.build(context.cl_context, device, image)
    names = tuple(n for n in str(cl_program.kernel_names).split(";") if n)
    program = OclProgram(cl_program, context, device, names)
    with driver_call("setting up the program state block"):
        program.state = state.create(program)
    return program


@hookimpl
def unload_binary_impl(device: OclDevice, program: OclProgram) -> None:
    state.destroy(program)
    program.cl_program = None


def _ordered(names: Sequence[str], pattern: re.Pattern[str], reverse: bool) -> tuple[str, ...]:
    found = sorted(
        ((int(m.group(1) or DEFAULT_PRIORITY), n) for n in names if (m := pattern.fullmatch(n))), reverse=reverse
    )
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
def get_global_impl(device: OclDevice, program: OclProgram, name: str) -> tuple[int, int]:
    offset, size = program.state.variables[name]  # only state-block variables are listed
    return program.state.base + offset, size


@hookimpl
def compile_impl(device: OclDevice, source: str, options: tuple[str, ...]) -> bytes:
    import pyopencl as cl

    with driver_call("building OpenCL C"):
        program = images.build_source(cl.Context([device.cl_device]), device, source, options)
        return bytes(program.get_info(cl.program_info.BINARIES)[0])


@hookimpl
def link_impl(device: OclDevice, sources: tuple[str, ...], options: tuple[str, ...]) -> bytes:
    with driver_call("compiling and linking OpenCL C"):
        return images.link_sources(device, sources, options)


@hookimpl
def compiler_id_impl(device: OclDevice) -> str:
    d = device.cl_device
    return f"{d.platform.version} | {d.name} | {d.driver_version} | {' '.join(images.SOURCE_OPTIONS)}"


# -- kernels and launches (launch.py) -----------------------------------------------------


@hookimpl
def get_kernel_impl(device: OclDevice, program: OclProgram, name: str) -> OclKernel:
    return launch.make_kernel(program, name)


@hookimpl
def kernel_signature_impl(device: OclDevice, kernel: OclKernel) -> tuple[str, ...] | None:
    return kernel.signature


@hookimpl
def kernel_attributes_impl(device: OclDevice, kernel: OclKernel) -> dict[str, Any]:
    with driver_call(f"querying kernel {kernel.name!r}"):
        return launch.attributes(device, kernel)


@hookimpl
def kernel_packer_impl(
    device: OclDevice, kernel: OclKernel, kinds: tuple[str, ...]
) -> Callable[[tuple[Any, ...]], Any]:
    return launch.packer(kinds)


@hookimpl
def launch_impl(
    device: OclDevice,
    queue: OclQueue,
    kernel: OclKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: list[tuple[int, Any]],
) -> None:
    import pyopencl as cl

    gws = (grid[0] * block[0], grid[1] * block[1], grid[2] * block[2])
    try:
        with kernel.lock:  # OpenCL captures the arguments at enqueue
            setter = kernel.setters
            for i, (how, value) in enumerate(args):
                setter[how](i, value)
            queue.last = cl.enqueue_nd_range_kernel(queue.cl_queue, kernel.cl_kernel, gws, block)
    except cl.Error as exc:  # hot path: no context manager on success
        raise translate(exc, f"launching {kernel.name!r}") from exc


@hookimpl
def launch_prepare_impl(
    device: OclDevice,
    queue: OclQueue,
    kernel: OclKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: list[tuple[int, Any]],
) -> Callable[..., None]:
    with driver_call(f"preparing {kernel.name!r}"):
        return launch.prepare(queue, kernel, grid, block, args)


# -- queues and events --------------------------------------------------------------------


@hookimpl
def queue_create_impl(context: OclContext, device: OclDevice, profiling: bool) -> OclQueue:
    import pyopencl as cl

    props: Any = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
    with driver_call("creating a command queue"):
        return OclQueue(cl.CommandQueue(context.cl_context, device.cl_device, properties=props), context)


@hookimpl
def queue_destroy_impl(device: OclDevice, queue: OclQueue) -> None:
    queue.last = None  # the cl.CommandQueue is released with its last Python reference


@hookimpl
def queue_synchronize_impl(device: OclDevice, queue: OclQueue) -> None:
    import pyopencl as cl

    last = queue.last
    try:
        queue.cl_queue.finish()
        # A negative status: that command (or one before it) failed; check_status words it.
        if last is not None and last.get_info(cl.event_info.COMMAND_EXECUTION_STATUS) < 0:
            check_status(last, "waiting for a queue")
    except cl.Error as exc:  # no context manager: every synchronous operation ends here
        raise translate(exc, "waiting for a queue") from exc


@hookimpl
def queue_query_impl(device: OclDevice, queue: OclQueue) -> bool:
    last = queue.last
    if last is None or check_status(last, "querying a queue"):
        return True
    queue.cl_queue.flush()  # make sure pending commands get to the device
    return False


@hookimpl
def enqueue_host_function_impl(device: OclDevice, queue: OclQueue, fn: Callable[[], None]) -> bool:
    """A marker (earlier work done), a user event (the function) and a barrier on it that holds
    later work back; a thread of ours waits for the marker, runs ``fn`` and completes the user
    event.  ``fn`` never runs on a driver callback thread, so it may call OpenCL itself."""
    import pyopencl as cl

    with driver_call("enqueueing a host function"):
        user = cl.UserEvent(queue.context.cl_context)
        before = cl._cl._enqueue_marker_with_wait_list(queue.cl_queue, None)
        try:
            queue.last = cl._cl._enqueue_barrier_with_wait_list(queue.cl_queue, [user])
        except BaseException:
            user.set_status(cl.command_execution_status.COMPLETE)
            raise

    def run() -> None:
        try:
            before.wait()
        except cl.Error:
            pass  # the queue's waits report failed earlier work; in order, the function still runs
        try:
            fn()
        finally:
            user.set_status(cl.command_execution_status.COMPLETE)

    threading.Thread(target=run, name="pyoffload-opencl-host-function", daemon=True).start()
    return True


@hookimpl
def queue_wait_events_impl(device: OclDevice, queue: OclQueue, events: Sequence[OclEvent]) -> bool | None:
    import pyopencl as cl

    if any(e.queue.context is not queue.context for e in events):
        return None  # a wait list takes events of the queue's own context only
    with driver_call("ordering a queue after events"):
        queue.last = cl._cl._enqueue_barrier_with_wait_list(queue.cl_queue, [e.cl_event for e in events])
    return True


@hookimpl
def event_record_impl(device: OclDevice, queue: OclQueue) -> OclEvent:
    import pyopencl as cl

    command = queue.last
    try:
        queue.last = marker = cl._cl._enqueue_marker_with_wait_list(queue.cl_queue, None)
    except cl.Error as exc:
        raise translate(exc, "recording an event") from exc
    event = _new(OclEvent)  # no __init__ frame: events are recorded on hot paths
    event.cl_event, event.queue, event.command = marker, queue, command
    return event


@hookimpl
def event_wait_impl(device: OclDevice, event: OclEvent) -> None:
    import pyopencl as cl

    try:
        event.cl_event.wait()  # clWaitForEvents fails if the command (or one before it) failed
    except cl.Error as exc:
        raise translate(exc, "waiting for an event") from exc


@hookimpl
def event_query_impl(device: OclDevice, event: OclEvent) -> bool:
    if check_status(event.cl_event, "querying an event"):
        return True
    event.queue.cl_queue.flush()
    return False


@hookimpl
def event_release_impl(device: OclDevice, event: OclEvent) -> None:
    event.cl_event = None  # releases the cl_event now, even if the handle lingers


@hookimpl
def event_elapsed_impl(device: OclDevice, start: OclEvent, end: OclEvent) -> float:
    import pyopencl as cl

    # Markers: CL_PROFILING_COMMAND_END is when everything before them had completed.
    try:
        return (int(end.cl_event.profile.end) - int(start.cl_event.profile.end)) / 1e6
    except cl.Error as exc:
        raise UnsupportedError(f"no profiling information for these events: {exc}") from exc


@hookimpl
def event_profiling_impl(device: OclDevice, start: OclEvent, end: OclEvent) -> dict[str, int] | None:
    import pyopencl as cl

    # The command between the two markers is the operation; where the operation enqueued no
    # command of its own (the newest one before the end marker is the start marker), the
    # generic rule times the markers instead.
    command = end.command
    if command is None or command is start.cl_event:
        return None
    try:
        profile = command.profile
        return {
            "queued": int(profile.queued),
            "submitted": int(profile.submit),
            "started": int(profile.start),
            "ended": int(profile.end),
        }
    except cl.Error as exc:
        raise UnsupportedError(f"no profiling information for this command: {exc}") from exc


# -- conformance --------------------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: OclDevice) -> dict[str, bytes]:
    # OpenCL C source is this backend's portable image format: the driver builds it for
    # whichever device loads it.
    from importlib import resources  # the conformance sources only: not at discovery

    root = resources.files(__package__) / "conformance_src"
    return {name: (root / f"{name}.cl").read_bytes() for name in ("kernels", "ctor_dtor")}
