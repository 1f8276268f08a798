"""The CUDA backend's hook implementations (hook contract v1), on pycuda's ``pycuda.driver``
(or the fake one, ``PYOFFLOAD_CUDA_DRIVER=fake``), imported by ``init_impl``, never at import.

Each device's *primary* context, retained lazily, is made current around each driver call only
where it is not current already (:func:`call`).  pycuda releases an object only where its context
is current or on the thread that retained it, so every release happens inside :func:`call` too.
Not provided, for lack of a pycuda binding (the generic defaults apply): stream-ordered
allocation, managed-memory hints, "is this pointer pinned already" and host functions.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from pyoffload.backend import (
    AllocKind,
    CompileError,
    DeviceDesc,
    DeviceType,
    Errc,
    InitFini,
    InvalidArgumentError,
    MemoryConnection,
    NoDevicesError,
    OffloadError,
    PlatformDesc,
    SymbolDesc,
    SymbolKind,
    UnsupportedError,
    c_alignment,
    hookimpl,
    struct_kind,
)

from . import nvcc
from .binding import driver_library, driver_mode, load_driver, translate
from .images import ImageFormat, demangle, detect_format, image_symbols

HOOK_API = (1, 2)  # the version of pyoffload's hook contract this backend implements (a literal, not an import)

__all__ = ["HOOK_API"]

_T = TypeVar("_T")

INIT, FINI = "nvptx$device$init", "nvptx$device$fini"
SHARED_ALIGN = 16  # each LocalMemory argument starts at a 16-byte aligned offset


class CudaDevice:
    """A device, its primary context (retained on first use) and the attributes hooks read."""

    def __init__(self, cuda: Any, ordinal: int) -> None:
        self.cuda, self.dev = cuda, cuda.Device(ordinal)
        self.name = str(self.dev.name())
        major, minor = self.dev.compute_capability()
        self.sm = major * 10 + minor
        self.warp = int(self.dev.get_attribute(cuda.device_attribute.WARP_SIZE))
        self.max_pitch = int(self.dev.get_attribute(cuda.device_attribute.MAX_PITCH))
        self.ctx: Any = None
        self._lock = threading.Lock()

    def context(self) -> Any:
        with self._lock:
            if self.ctx is None:
                self.ctx = self.dev.retain_primary_context()
            return self.ctx


def call(device: CudaDevice, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` with the device's primary context current on this thread (pushed
    only where it is not current already), pycuda's exceptions turned into pyoffload errors.
    One Python frame: the enqueue hooks are hot paths."""
    cuda = device.cuda
    ctx = device.ctx if device.ctx is not None else device.context()
    current = cuda.Context.get_current()
    pushed = current is None or current.handle != ctx.handle
    try:
        if pushed:
            ctx.push()
        return fn(*args, **kwargs)
    except cuda.Error as exc:
        raise translate(cuda, exc, what) from exc
    finally:
        if pushed:
            cuda.Context.pop()


_devices: list[CudaDevice] = []  # between init_impl and deinit_impl
# Address -> the pycuda object that owns the memory; single dict operations are atomic, so
# threads need no lock of ours.
_owners: dict[int, Any] = {}


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    cuda = load_driver()
    try:
        cuda.init()
        devices = [CudaDevice(cuda, i) for i in range(int(cuda.Device.count()))]
        version = int(cuda.get_driver_version())
    except cuda.Error as exc:
        raise NoDevicesError(str(exc)) from exc
    if not devices:
        raise NoDevicesError("cuInit succeeded but the driver reports no CUDA device")
    fake = driver_mode() == "fake"
    _devices[:] = devices
    text = f"CUDA {version // 1000}.{version % 1000 // 10}" + (" (fake driver)" if fake else "")
    descs = tuple(DeviceDesc(d.name, "NVIDIA", DeviceType.GPU, d) for d in devices)
    return [PlatformDesc("fake" if fake else "CUDA", "NVIDIA", text, descs, cuda)]


@hookimpl
def deinit_impl() -> None:
    binding = _devices[0].cuda if _devices else None
    for d in _devices:
        ctx, d.ctx = d.ctx, None
        if ctx is not None:
            ctx.detach()
    _devices.clear()
    getattr(binding, "finish", lambda: None)()  # the fake driver's leak report


_INFO = {
    "compute_units": "MULTIPROCESSOR_COUNT",
    "max_work_group_size": "MAX_THREADS_PER_BLOCK",
    "local_memory_bytes": "MAX_SHARED_MEMORY_PER_BLOCK",
    "sub_group_size": "WARP_SIZE",
    "clock_mhz": "CLOCK_RATE",
    "cuda.unified_addressing": "UNIFIED_ADDRESSING",
    "cuda.managed_memory": "MANAGED_MEMORY",
    "cuda.concurrent_managed_access": "CONCURRENT_MANAGED_ACCESS",
    "cuda.can_map_host_memory": "CAN_MAP_HOST_MEMORY",
}


@hookimpl
def device_info_impl(device: CudaDevice) -> dict[str, Any]:
    cuda, dev = device.cuda, device.dev
    attr = cuda.device_attribute
    try:
        info: dict[str, Any] = {k: int(dev.get_attribute(getattr(attr, a))) for k, a in _INFO.items()}
        dims = [int(dev.get_attribute(getattr(attr, f"MAX_{w}_DIM_{x}"))) for w in ("BLOCK", "GRID") for x in "XYZ"]
        memory = int(dev.total_memory())
        version = int(cuda.get_driver_version())
        bus = str(dev.pci_bus_id())
    except cuda.Error as exc:
        raise translate(cuda, exc, "reading device attributes") from exc
    info.update({k: bool(v) for k, v in info.items() if k.startswith("cuda.")})
    info.update(
        driver_version=f"{version // 1000}.{version % 1000 // 10}",
        global_memory_bytes=memory,
        max_alloc_bytes=memory,
        max_work_item_sizes=tuple(dims[:3]),
        max_grid_size=tuple(dims[3:]),
        clock_mhz=info["clock_mhz"] // 1000,
        address_bits=64,
        dlpack_device_types={"DEVICE": 2, "HOST": 3, "MANAGED": 13},  # kDLCUDA, Host, Managed
        memory_kinds=tuple(k.name for k in AllocKind if k is not AllocKind.MANAGED or info["cuda.managed_memory"]),
        **{
            "cuda.architecture": f"sm_{device.sm}",
            "cuda.compute_capability": f"{device.sm // 10}.{device.sm % 10}",
            "cuda.pci_bus_id": bus,
        },
    )
    return info


_NATIVE: dict[str, Callable[[Any], Any]] = {
    "device": lambda d: d.dev,
    "queue": lambda q: int(q.stream.handle),
    "event": lambda e: e[0],
    "program": lambda p: p.module,
    "kernel": lambda k: k.function,
}


@hookimpl
def native_handle_impl(kind: str, handle: Any) -> Any:
    return _NATIVE[kind](handle) if kind in _NATIVE else handle


# -- contexts and memory ------------------------------------------------------------------


@hookimpl
def memory_connection_impl(
    context_a: Any, device_a: CudaDevice | None, context_b: Any, device_b: CudaDevice | None
) -> MemoryConnection | None:
    """Two devices of one context that can reach each other get peer access both ways (kept
    until their primary contexts are released): their memory is UNIFIED.  Everything else has
    the generic answer (memcpy_peer copies between devices without peer access)."""
    if context_a is not context_b or device_a is None or device_b is None or device_a is device_b:
        return None
    if not (device_a.dev.can_access_peer(device_b.dev) and device_b.dev.can_access_peer(device_a.dev)):
        return None
    for a, b in ((device_a, device_b), (device_b, device_a)):
        try:
            call(a, "enabling peer access", a.cuda.Context.enable_peer_access, b.context())
        except OffloadError as exc:  # pycuda: "peer access is already enabled"
            if "already enabled" not in str(exc):
                raise
    return MemoryConnection.UNIFIED


@hookimpl
def data_alloc_impl(context: Any, device: CudaDevice | None, size: int, kind: AllocKind) -> int:
    cuda = (device or context[0]).cuda

    def alloc() -> tuple[Any, int]:
        if kind is AllocKind.DEVICE:
            obj = cuda.mem_alloc(size)
            return obj, int(obj)
        if kind is AllocKind.MANAGED:
            obj = cuda.managed_empty(size, np.uint8, "C", int(cuda.mem_attach_flags.GLOBAL))
            return obj, int(obj.ctypes.data)
        # Mapped (device-accessible at the same address under unified addressing) and portable
        # (pinned for every context, so all devices of the context can use it).
        obj = cuda.pagelocked_empty(
            size, np.uint8, "C", int(cuda.host_alloc_flags.DEVICEMAP) | int(cuda.host_alloc_flags.PORTABLE)
        )
        if int(obj.base.get_device_pointer()) != int(obj.ctypes.data):
            obj.base.free()
            raise UnsupportedError("pinned host memory is mapped at another device address (no unified addressing)")
        return obj, int(obj.ctypes.data)

    obj, ptr = call(device or context[0], f"allocating {size} bytes of {kind.name} memory", alloc)
    _owners[ptr] = obj
    return ptr


@hookimpl
def data_free_impl(context: Any, device: CudaDevice | None, ptr: int, kind: AllocKind) -> None:
    owner: Any = _owners.pop(ptr)
    owner = owner.base if isinstance(owner, np.ndarray) else owner  # host kinds: the array's base owns it
    call(device or context[0], f"freeing {kind.name} memory at 0x{ptr:x}", owner.free)


@hookimpl
def data_submit_impl(device: CudaDevice, queue: CudaQueue, dst: int, src: memoryview, size: int) -> None:
    call(device, "copying host to device", device.cuda.memcpy_htod_async, dst, src[:size], queue.stream)


@hookimpl
def data_retrieve_impl(device: CudaDevice, queue: CudaQueue, dst: memoryview, src: int, size: int) -> None:
    call(device, "copying device to host", device.cuda.memcpy_dtoh_async, dst[:size], src, queue.stream)


@hookimpl
def data_exchange_impl(
    src_device: CudaDevice, src: int, dst_device: CudaDevice, dst: int, size: int, queue: CudaQueue
) -> None:
    if src < dst + size and dst < src + size:
        raise UnsupportedError("cuMemcpy* does not copy overlapping ranges")
    if src_device is dst_device:
        call(queue.device, "copying on a device", dst_device.cuda.memcpy_dtod_async, dst, src, size, queue.stream)
    else:
        call(
            queue.device,
            "copying between devices",
            dst_device.cuda.memcpy_peer_async,
            dst,
            src,
            size,
            dst_device.context(),
            src_device.context(),
            queue.stream,
        )


@hookimpl
def data_fill_impl(device: CudaDevice, queue: CudaQueue, ptr: int, pattern: bytes, size: int) -> None:
    cuda, width = device.cuda, len(pattern)
    if width not in (1, 2, 4) or ptr % width:
        raise UnsupportedError(f"cuMemsetD* fills 1, 2 or 4 aligned bytes, not a {width}-byte pattern at 0x{ptr:x}")
    fill = {1: cuda.memset_d8_async, 2: cuda.memset_d16_async, 4: cuda.memset_d32_async}[width]
    call(device, f"filling {size} bytes", fill, ptr, int.from_bytes(pattern, "little"), size // width, queue.stream)


@hookimpl
def memcpy_rect_impl(
    device: CudaDevice,
    queue: CudaQueue,
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
    cuda = device.cuda
    if max(dst_pitch, src_pitch) > device.max_pitch:
        raise UnsupportedError(f"cuMemcpy2D/3D take pitches up to {device.max_pitch} bytes")
    copy = cuda.Memcpy2D() if depth == 1 else cuda.Memcpy3D()
    if isinstance(src, int):
        copy.set_src_device(src)
    else:
        copy.set_src_host(src)
    if isinstance(dst, int):
        copy.set_dst_device(dst)
    else:
        copy.set_dst_host(dst)
    copy.src_pitch, copy.dst_pitch = src_pitch, dst_pitch
    copy.width_in_bytes, copy.height = width, height
    if depth > 1:  # CUDA_MEMCPY3D counts a slice in rows
        copy.src_height, copy.dst_height = src_slice_pitch // src_pitch, dst_slice_pitch // dst_pitch
        copy.depth = depth
    call(device, f"copying a {width}x{height}x{depth} region", copy, queue.stream)


@hookimpl
def memfill_rect_impl(
    device: CudaDevice, queue: CudaQueue, ptr: int, pitch: int, pattern: bytes, width: int, height: int
) -> None:
    cuda, unit = device.cuda, len(pattern)
    if unit not in (1, 2, 4) or ptr % unit or pitch % unit or pitch > device.max_pitch:
        raise UnsupportedError(f"cuMemsetD2D* fills 1, 2 or 4 aligned bytes, not a {unit}-byte pattern at 0x{ptr:x}")
    fill = {1: cuda.memset_d2d8_async, 2: cuda.memset_d2d16_async, 4: cuda.memset_d2d32_async}[unit]
    value = int.from_bytes(pattern, "little")
    call(
        device, f"filling {height} rows of {width} bytes", fill, ptr, pitch, value, width // unit, height, queue.stream
    )


def _libcuda(device: CudaDevice, name: str, *args: Any) -> None:
    """``name(*args)`` from the driver library itself, raising the binding's error on failure."""
    lib = driver_library(device.cuda)
    code = getattr(lib, name)(*args)
    if code:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(code, ctypes.byref(text))
        raise device.cuda.Error(f"{name} failed: {(text.value or b'unknown error').decode()}")


@hookimpl
def data_lock_impl(device: CudaDevice, ptr: int, size: int) -> int:
    # pycuda's register_host_memory refuses numpy arrays with a base, and every wrapper of memory
    # it did not allocate has one: register the raw range with the driver library pycuda loaded.
    flags = int(device.cuda.mem_host_register_flags.DEVICEMAP) | int(device.cuda.mem_host_register_flags.PORTABLE)
    what, address = f"pinning {size} bytes at 0x{ptr:x}", ctypes.c_void_p(ptr)
    call(device, what, _libcuda, device, "cuMemHostRegister_v2", address, ctypes.c_size_t(size), ctypes.c_uint(flags))
    mapped = ctypes.c_uint64()
    try:
        call(device, what, _libcuda, device, "cuMemHostGetDevicePointer_v2", ctypes.byref(mapped), address, 0)
    except OffloadError:
        data_unlock_impl(device, ptr)
        raise
    return mapped.value


@hookimpl
def data_unlock_impl(device: CudaDevice, ptr: int) -> None:
    call(device, f"unpinning 0x{ptr:x}", _libcuda, device, "cuMemHostUnregister", ctypes.c_void_p(ptr))


# -- programs and kernels -----------------------------------------------------------------


class CudaProgram:
    """A loaded module.  ``names`` maps each kernel's listed name to its symbol: a C++ kernel
    is listed under its plain name (``iota_i32`` for ``_Z8iota_i32Piii``) unless overloaded."""

    def __init__(self, module: Any, kernels: Sequence[str], globals_: dict[str, int]) -> None:
        self.module = module
        self.globals = globals_
        plain = [d[0] if (d := demangle(k)) else k for k in kernels]
        self.names = {p if plain.count(p) == 1 else k: k for p, k in zip(plain, kernels, strict=True)}
        self.kernels: list[CudaKernel] = []


class CudaKernel:
    """A kernel: its pycuda Function, signature, and one prepared Function per packed size."""

    def __init__(self, program: CudaProgram, symbol: str, function: Any) -> None:
        self.program = program
        self.symbol = symbol
        self.function = function
        self.signature = (demangle(symbol) or ("", None))[1]
        self.prepared: dict[int, Any] = {}


@hookimpl
def load_binary_impl(context: Any, device: CudaDevice, image: bytes) -> CudaProgram:
    fmt = detect_format(image)
    syms = image_symbols(image, fmt)
    if fmt is ImageFormat.PTX and not image.endswith(b"\0"):
        image += b"\0"  # cuModuleLoadData reads PTX up to its NUL terminator
    cuda = device.cuda
    log: list[str] = []
    try:
        module = call(
            device,
            f"loading a {fmt.value} image",
            cuda.module_from_buffer,
            image,
            [],
            lambda ok, info, error: log.append(error),
        )
    except CompileError as exc:
        exc.build_log = exc.build_log or "".join(log)
        raise
    except Exception as exc:
        if fmt is ImageFormat.PTX:  # the driver JIT-compiles PTX: any failure to load it is a build failure
            raise CompileError(str(exc), build_log="".join(log)) from exc
        raise
    return CudaProgram(module, syms.kernels, syms.globals)


@hookimpl
def unload_binary_impl(device: CudaDevice, program: CudaProgram) -> None:
    # pycuda unloads a module when its last Function goes: drop them all, with the context current.
    def unload() -> None:
        for k in program.kernels:
            k.function = None
            k.prepared.clear()
        program.kernels.clear()
        program.module = None

    call(device, "unloading a module", unload)


@hookimpl
def global_init_fini_impl(device: CudaDevice, program: CudaProgram) -> InitFini:
    return InitFini(
        init=tuple(n for n in (INIT,) if n in program.names), fini=tuple(n for n in (FINI,) if n in program.names)
    )


@hookimpl
def get_symbols_impl(device: CudaDevice, program: CudaProgram) -> Sequence[SymbolDesc]:
    return [SymbolDesc(n, SymbolKind.KERNEL) for n in program.names] + [
        SymbolDesc(n, SymbolKind.GLOBAL, size) for n, size in program.globals.items()
    ]


@hookimpl
def get_kernel_impl(device: CudaDevice, program: CudaProgram, name: str) -> CudaKernel:
    symbol = program.names[name]
    kernel = CudaKernel(program, symbol, call(device, f"kernel {name!r}", program.module.get_function, symbol))
    program.kernels.append(kernel)
    return kernel


@hookimpl
def get_global_impl(device: CudaDevice, program: CudaProgram, name: str) -> tuple[int, int]:
    ptr, size = call(device, f"global variable {name!r}", program.module.get_global, name)
    return int(ptr), int(size)


@hookimpl
def kernel_signature_impl(device: CudaDevice, kernel: CudaKernel) -> tuple[str, ...] | None:
    return kernel.signature


@hookimpl
def kernel_attributes_impl(device: CudaDevice, kernel: CudaKernel) -> dict[str, Any]:
    attr = device.cuda.function_attribute
    keys = {
        "max_work_group_size": attr.MAX_THREADS_PER_BLOCK,
        "local_memory_bytes": attr.SHARED_SIZE_BYTES,
        "private_memory_bytes": attr.LOCAL_SIZE_BYTES,
        "registers": attr.NUM_REGS,
    }
    found = {
        k: int(call(device, "reading kernel attributes", kernel.function.get_attribute, a)) for k, a in keys.items()
    }
    return {**found, "preferred_work_group_multiple": device.warp}


# Parameter kinds as struct codes; CUDA lays parameters out with natural alignment.
_CODES = {
    "ptr": "Q",
    "local": "Q",
    "i8": "b",
    "i16": "h",
    "i32": "i",
    "i64": "q",
    "u8": "B",
    "u16": "H",
    "u32": "I",
    "u64": "Q",
    "f16": "e",
    "f32": "f",
    "f64": "d",
}


@hookimpl
def kernel_packer_impl(
    device: CudaDevice, kernel: CudaKernel, kinds: tuple[str, ...]
) -> Callable[[tuple[Any, ...]], Any]:
    """Pack a launch into ``(size, (parameter buffer,), dynamic shared bytes)``: the buffer is
    built with one ``struct.Struct`` per signature and handed to a pycuda Function prepared for a
    buffer of that size.  Each LocalMemory argument becomes its byte offset in the launch's
    dynamic shared memory (see docs/backends/cuda.md)."""
    structs = [i for i, k in enumerate(kinds) if struct_kind(k) is not None]
    if structs:
        return _struct_packer(kinds, structs)
    layout = _layout(kinds, {})
    size = layout.size
    if "local" not in kinds:
        return lambda values: (size, (layout.pack(*values),) if size else (), 0)
    local = [i for i, k in enumerate(kinds) if k == "local"]

    def pack(values: tuple[Any, ...]) -> tuple[int, tuple[bytes], int]:
        params, shared = list(values), 0
        for i in local:
            start = -(-shared // SHARED_ALIGN) * SHARED_ALIGN
            params[i], shared = start, start + values[i].size
        return size, (layout.pack(*params),), shared

    return pack


def _layout(kinds: tuple[str, ...], aligns: dict[int, int]) -> struct.Struct:
    """The parameter buffer: each parameter at its natural alignment, a struct by value (``"v<N>"``,
    N bytes) at its C alignment ``aligns[i]``, as nvcc lays out ``.param .align A .b8 p[N]``."""
    fmt, offset = "<", 0
    for i, kind in enumerate(kinds):
        n = struct_kind(kind)
        code, align = (f"{n}s", aligns[i]) if n is not None else (_CODES[kind], struct.calcsize(_CODES[kind]))
        fmt += "x" * (-offset % align) + code
        offset += -offset % align + struct.calcsize(code)
    return struct.Struct(fmt)


def _struct_packer(kinds: tuple[str, ...], structs: list[int]) -> Callable[[tuple[Any, ...]], Any]:
    """A packer for signatures with structs by value: their alignment comes from each value's
    dtype, so the layout is looked up per launch (cached per alignments)."""
    layouts: dict[tuple[int, ...], struct.Struct] = {}
    local = [i for i, k in enumerate(kinds) if k == "local"]

    def pack(values: tuple[Any, ...]) -> tuple[int, tuple[bytes, ...], int]:
        aligns = tuple(c_alignment(values[i].dtype) for i in structs)
        layout = layouts.get(aligns)
        if layout is None:
            layout = layouts[aligns] = _layout(kinds, dict(zip(structs, aligns, strict=True)))
        params, shared = list(values), 0
        for i in structs:
            params[i] = values[i].tobytes()
        for i in local:
            start = -(-shared // SHARED_ALIGN) * SHARED_ALIGN
            params[i], shared = start, start + values[i].size
        return layout.size, (layout.pack(*params),) if layout.size else (), shared

    return pack


@hookimpl
def launch_impl(
    device: CudaDevice,
    queue: CudaQueue,
    kernel: CudaKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[int, tuple[bytes], int],
) -> None:
    size, params, shared = args
    function = kernel.prepared.get(size) or _prepare(device, kernel, size)
    call(
        device,
        "launching a kernel",
        function.prepared_async_call,
        grid,
        block,
        queue.stream,
        *params,
        shared_size=shared,
    )


def _prepare(device: CudaDevice, kernel: CudaKernel, size: int) -> Any:
    """A Function of the kernel prepared for a parameter buffer of ``size`` bytes (pycuda keeps the
    format on the Function object, so each buffer size gets its own)."""
    function = call(device, "preparing a kernel", kernel.program.module.get_function, kernel.symbol)
    return kernel.prepared.setdefault(size, function.prepare([f"{size}s"] if size else []))


@hookimpl
def launch_prepare_impl(
    device: CudaDevice,
    queue: CudaQueue,
    kernel: CudaKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[int, tuple[bytes], int],
) -> Callable[[], None]:
    size, params, shared = args
    launch = (kernel.prepared.get(size) or _prepare(device, kernel, size)).prepared_async_call
    # The stream is read at each call: a prepared launch must not keep it past queue_destroy_impl.
    return lambda: call(device, "launching a kernel", launch, grid, block, queue.stream, *params, shared_size=shared)


@hookimpl
def compile_impl(device: CudaDevice, source: str, options: tuple[str, ...]) -> bytes:
    found = nvcc.find_nvcc()
    sm = nvcc.pick_arch(found, device.sm) if found else device.sm
    if sm is None:
        raise UnsupportedError(f"nvcc cannot target sm_{device.sm} or anything older")
    return nvcc.compile_source(source, "ptx", sm, options, found)


@hookimpl
def compiler_id_impl(device: CudaDevice) -> str | None:
    found = nvcc.find_nvcc()
    if found is None:
        return None
    return f"{nvcc.version(found)}; sm_{nvcc.pick_arch(found, device.sm)}; driver {device.cuda.get_driver_version()}"


# Build targets ("cuda:sm_80"): CUDA C++ to PTX with nvcc needs no GPU and no driver.


@hookimpl
def build_target_impl(device: CudaDevice) -> str:
    return f"cuda:sm_{device.sm}"


def _target_tools(target: str, compiler: str | None) -> tuple[str, int]:
    """``(nvcc path, SM it builds for)`` of a build for ``target`` with ``compiler``."""
    arch = target.removeprefix("cuda:sm_")
    if not arch.isdigit() or not target.startswith("cuda:sm_"):
        raise InvalidArgumentError(f"unknown CUDA build target {target!r}; expected 'cuda:sm_<NN>', e.g. 'cuda:sm_80'")
    found = nvcc.find_nvcc() if compiler is None else shutil.which(compiler)
    if found is None:
        raise OffloadError(
            f"{compiler or 'nvcc'} not found (set CUDA_ROOT or put nvcc on PATH)", Errc.HOST_TOOL_NOT_FOUND
        )
    if not os.path.basename(found).startswith("nvcc"):
        raise UnsupportedError(f"the CUDA backend builds CUDA C++ with nvcc only, not {compiler!r}")
    sm = nvcc.pick_arch(found, int(arch))
    if sm is None:
        raise UnsupportedError(f"{found} cannot target sm_{arch} or anything older")
    return found, sm


@hookimpl
def target_compiler_id_impl(target: str, compiler: str | None) -> str:
    found, sm = _target_tools(target, compiler)
    return f"{os.path.realpath(found)} {nvcc.version(found)}; sm_{sm}"


@hookimpl
def target_compile_impl(target: str, source: str, options: tuple[str, ...], compiler: str | None) -> bytes:
    found, sm = _target_tools(target, compiler)
    return nvcc.compile_source(source, "ptx", sm, options, found)


@hookimpl
def target_link_impl(target: str, sources: tuple[str, ...], options: tuple[str, ...], compiler: str | None) -> bytes:
    # nvcc -dc per source, then nvlink (nvcc -dlink -cubin): offline, so no device or driver is
    # needed, unlike the driver's JIT linker (cuLinkCreate ... cuLinkComplete).
    found, sm = _target_tools(target, compiler)
    wanted = int(target.removeprefix("cuda:sm_"))
    if sm // 10 != wanted // 10:
        raise UnsupportedError(
            f"build_program of several sources for {target}: {found} cannot link for sm_{wanted} (nvlink links "
            f"machine code only, and its newest is sm_{sm}, whose cubin does not load there); build them as one source"
        )
    return nvcc.link_sources(sources, sm, options, found)


# -- queues and events --------------------------------------------------------------------


class CudaQueue:
    """A stream; ``borrowed`` streams (``Queue.from_native``) belong to the application."""

    def __init__(self, device: CudaDevice, stream: Any, profiling: bool, borrowed: bool = False) -> None:
        self.device = device
        self.stream = stream
        self.borrowed = borrowed
        self.event_flags = 0 if profiling else int(device.cuda.event_flags.DISABLE_TIMING)


# An event handle is a one-element list holding the pycuda Event: releasing it empties the list
# with the context current (pycuda destroys the event with its last reference).
CudaEvent = list


@hookimpl
def queue_create_impl(context: Any, device: CudaDevice, profiling: bool) -> CudaQueue:
    return CudaQueue(device, call(device, "creating a stream", device.cuda.Stream), profiling)


@hookimpl
def queue_from_native_impl(context: Any, device: CudaDevice, native: Any, profiling: bool) -> CudaQueue:
    if not isinstance(native, device.cuda.Stream):
        raise UnsupportedError("pycuda can only use streams it made: pass a pycuda.driver.Stream, not a raw CUstream")
    return CudaQueue(device, native, profiling, borrowed=True)


@hookimpl
def queue_destroy_impl(device: CudaDevice, queue: CudaQueue) -> None:
    def destroy() -> None:
        queue.stream = None  # pycuda destroys an owned stream with its last reference

    call(device, "destroying a stream", destroy)


@hookimpl
def queue_synchronize_impl(device: CudaDevice, queue: CudaQueue) -> None:
    call(device, "synchronising a stream", queue.stream.synchronize)


@hookimpl
def queue_query_impl(device: CudaDevice, queue: CudaQueue) -> bool:
    return bool(call(device, "querying a stream", queue.stream.is_done))


@hookimpl
def queue_wait_events_impl(device: CudaDevice, queue: CudaQueue, events: Sequence[CudaEvent[Any]]) -> bool:
    for e in events:
        call(device, "ordering a stream after an event", queue.stream.wait_for_event, e[0])
    return True


@hookimpl
def event_record_impl(device: CudaDevice, queue: CudaQueue) -> CudaEvent[Any]:
    event = call(device, "creating an event", device.cuda.Event, queue.event_flags)
    return [call(device, "recording an event", event.record, queue.stream)]


@hookimpl
def event_wait_impl(device: CudaDevice, event: CudaEvent[Any]) -> None:
    call(device, "waiting for an event", event[0].synchronize)


@hookimpl
def event_query_impl(device: CudaDevice, event: CudaEvent[Any]) -> bool:
    return bool(call(device, "querying an event", event[0].query))


@hookimpl
def event_release_impl(device: CudaDevice, event: CudaEvent[Any]) -> None:
    call(device, "releasing an event", event.clear)


@hookimpl
def event_elapsed_impl(device: CudaDevice, start: CudaEvent[Any], end: CudaEvent[Any]) -> float:
    return float(call(device, "reading event timestamps", start[0].time_till, end[0]))


@hookimpl
def conformance_images_impl(device: CudaDevice) -> dict[str, bytes] | None:
    return nvcc.conformance_images(device.sm)
