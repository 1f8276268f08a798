"""The built-in host backend: the CPU as an offload device.

* Memory of every kind is host memory (64-byte aligned ``aligned_alloc``), so DEVICE, HOST and
  MANAGED pointers are all host pointers and every copy is a host ``memmove``.
* Images are ELF shared objects for this machine.  Each load gets its own instance: the bytes go
  into a fresh ``memfd`` and are ``dlopen``-ed from there, so loading the same image twice gives
  two independent copies of its globals.  The dynamic loader runs the ELF constructors at load
  and the destructors at ``dlclose`` (before the code is unmapped), exactly once each.
* Kernels are exported C functions.  A data-parallel one is declared with ``PYOFFLOAD_KERNEL``
  (``pyoffload_host.h``, which exports the marker ``pyoffload_parallel_<name>``; called per range
  of work-groups) or is plain C whose last parameter is a ``pyoffload_launch`` pointer (called
  per work-group).  Its launches run on the native runtime (:mod:`.runtime`,
  ``pyoffload_host_runtime.c``): the whole grid in one ctypes call, the groups on a pool of OS
  threads (``PYOFFLOAD_HOST_THREADS``, default the CPUs this process may use); a group that
  traps makes the launch fail.  Any other kernel is called once per launch with the arguments
  and loops over its work itself.  DWARF (``-g``) gives their signatures for launch-argument
  checks, and marks the launch-context parameter.
* Queues are worker threads (see :mod:`.worker`): launches really run asynchronously.
* Locking host memory only records the range in the generic pinned map: the host device reaches
  all host memory already.  The device's type is HOST, so the generic layer copies to and from
  it with ``memmove`` and never calls the copy hooks for the synchronous forms.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import os
import platform as _platform
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import settings
from ..backend import (
    HOOK_API,
    AllocKind,
    DeviceDesc,
    DeviceType,
    InvalidArgumentError,
    InvalidBinaryError,
    OffloadError,
    OutOfResourcesError,
    PlatformDesc,
    SymbolDesc,
    SymbolKind,
    UnsupportedError,
    hookimpl,
    struct_kind,
)
from . import runtime as _runtime
from .worker import HostEvent, HostQueue

if TYPE_CHECKING:  # the ELF reader is imported on the first load, not at discovery
    from .elf import ImageInfo

__all__ = ["HOOK_API"]

_libc = ctypes.CDLL(None, use_errno=True)
_aligned_alloc = _libc.aligned_alloc
_aligned_alloc.restype = ctypes.c_void_p
_aligned_alloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
_free = _libc.free
_free.argtypes = (ctypes.c_void_p,)
_free.restype = None
_dlclose = _libc.dlclose
_dlclose.argtypes = (ctypes.c_void_p,)
_dlerror = _libc.dlerror
_dlerror.restype = ctypes.c_char_p
_dlsym = _libc.dlsym
_dlsym.restype = ctypes.c_void_p
_dlsym.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
_memmove = ctypes.memmove
_byref = ctypes.byref
ALIGNMENT = 64
# Large allocations ask for transparent huge pages, as numpy does for its arrays: where the
# system leaves it to each process (THP "madvise" mode) they are otherwise 4 KiB pages, with more
# page faults and TLB misses, and a copy by another process (an MPI rank's cross-memory copy)
# pins each page it touches.
_madvise = getattr(_libc, "madvise", None) if sys.platform.startswith("linux") else None
if _madvise is not None:
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _madvise.restype = ctypes.c_int
MADV_HUGEPAGE = 14
HUGE_PAGES_FROM = 4 << 20
_PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096


class HostDevice:
    # The machine's architecture, as uname reports it (platform.processor() would run `uname -p`
    # in a child process on Linux, at every start).
    name = f"{_platform.machine()} (host)"


class HostProgram:
    __slots__ = ("lib", "info", "handle", "fd", "frames")

    def __init__(self, lib: ctypes.CDLL, info: ImageInfo, fd: int) -> None:
        self.lib = lib
        self.info = info
        self.handle = lib._handle
        self.fd = fd
        self.frames: dict[str, int] | None = None  # stack frame bytes per function, read on demand


class HostKernel:
    __slots__ = ("fn", "name", "signature", "abi", "program")

    def __init__(self, fn: Any, name: str, signature: tuple[str, ...] | None, abi: int, program: HostProgram) -> None:
        self.fn = fn
        self.name = name
        self.signature = signature
        # 0: called once per launch with its arguments; runtime.ABI_GROUPS (PYOFFLOAD_KERNEL) or
        # runtime.ABI_CONTEXT (a trailing pyoffload_launch pointer): data-parallel, run by the
        # native runtime
        self.abi = abi
        self.program = program

    @property
    def parallel(self) -> bool:
        return self.abi != 0


PARALLEL_MARKER = "pyoffload_parallel_"


_DEVICE = HostDevice()
# The threads a data-parallel launch runs on (the queue's worker included); set by init_impl.
_THREADS = 1


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    global _THREADS
    _THREADS = settings.integer("PYOFFLOAD_HOST_THREADS", None, minimum=1) or _cpus()
    device = DeviceDesc(HostDevice.name, _platform.machine(), DeviceType.HOST, _DEVICE)
    return [PlatformDesc("host", "pyoffload", sys.version.split()[0], (device,), None)]


@hookimpl
def deinit_impl() -> None:
    return None  # the native runtime's threads wait idle for the next runtime's launches


# The host's launch limits.  The work-items of a group run as loops inside one call, so any block
# would run; the limits are the ones PoCL's pthread device reports, so that a block size chosen
# for one CPU runtime runs on the other, and they are enforced at launch like every backend's.
MAX_WORK_GROUP_SIZE = 4096
MAX_WORK_ITEM_SIZES = (4096, 4096, 4096)
# Work-groups are numbered linearly in 64 bits (x fastest): these keep every grid's count of
# groups below 2**64.
MAX_GRID_SIZE = ((1 << 32) - 1, (1 << 16) - 1, (1 << 16) - 1)
# Local memory the runtime gives each work-group (all LocalMemory arguments of a launch
# together): a heap buffer per thread, about an L2 cache's worth.  Larger requests are refused at
# launch (OUT_OF_RESOURCES) instead of failing inside the thread that runs the group.
LOCAL_MEMORY_BYTES = 2 << 20
# Work-items of one group are the innermost loop of a kernel compiled for the baseline vector
# ISA (SSE2 on x86-64, NEON on AArch64: 16 bytes, four 32-bit lanes): a block that is a multiple
# of it vectorises without a remainder loop.
PREFERRED_WORK_GROUP_MULTIPLE = 4
# Every kind is host memory, which DLPack calls kDLCPU.
_KDLCPU = 1


def _clock_mhz() -> int | None:
    """The CPU's peak clock where the OS tells it: cpufreq's maximum, else the highest clock
    /proc/cpuinfo lists (virtual machines often have no cpufreq); ``None`` elsewhere."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return max(1, int(f.read().strip()) // 1000)  # kHz
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            clocks = [float(line.split(":", 1)[1]) for line in f if line.lower().startswith("cpu mhz")]
    except (OSError, ValueError, IndexError):
        return None
    return max(1, round(max(clocks))) if clocks else None


def _cpus() -> int:
    """The CPUs this process may run on (its affinity mask), which is what its threads get."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@hookimpl
def device_info_impl(device: HostDevice) -> dict[str, Any]:
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    kinds = tuple(kind.name for kind in AllocKind)
    return {
        "driver_version": f"{_platform.system()} {_platform.release()}",
        "compute_units": _cpus(),
        "max_work_group_size": MAX_WORK_GROUP_SIZE,
        "max_work_item_sizes": MAX_WORK_ITEM_SIZES,
        "max_grid_size": MAX_GRID_SIZE,
        "global_memory_bytes": pages * page_size,
        "local_memory_bytes": LOCAL_MEMORY_BYTES,
        "max_alloc_bytes": pages * page_size,
        "clock_mhz": _clock_mhz(),
        "sub_group_size": 1,  # the items of a group run one after another: no lockstep lanes
        "address_bits": ctypes.sizeof(ctypes.c_void_p) * 8,
        "memory_kinds": kinds,
        "dlpack_device_types": dict.fromkeys(kinds, _KDLCPU),
        "host.architecture": _platform.machine(),
        "host.alignment": ALIGNMENT,
    }


# -- memory -------------------------------------------------------------------------------


@hookimpl
def data_alloc_impl(context: Any, device: Any, size: int, kind: AllocKind) -> int:
    ptr = _aligned_alloc(ALIGNMENT, (size + ALIGNMENT - 1) & ~(ALIGNMENT - 1))
    if not ptr:
        raise OutOfResourcesError(f"host backend: aligned_alloc of {size} bytes failed")
    if size >= HUGE_PAGES_FROM and _madvise is not None:
        start = (ptr + _PAGE - 1) & ~(_PAGE - 1)
        _madvise(start, (ptr + size - start) & ~(_PAGE - 1), MADV_HUGEPAGE)  # (a refusal changes nothing)
    return int(ptr)


@hookimpl
def data_free_impl(context: Any, device: Any, ptr: int, kind: AllocKind) -> None:
    _free(ptr)


def _address(mv: memoryview) -> int:
    return (
        ctypes.addressof(ctypes.c_char.from_buffer(mv))
        if not mv.readonly
        else int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)
    )


@hookimpl
def data_submit_impl(device: Any, queue: HostQueue, dst: int, src: memoryview, size: int) -> None:
    queue.submit(_memmove, (dst, _address(src), size))


@hookimpl
def data_retrieve_impl(device: Any, queue: HostQueue, dst: memoryview, src: int, size: int) -> None:
    queue.submit(_memmove, (_address(dst), src, size))


@hookimpl
def data_exchange_impl(src_device: Any, src: int, dst_device: Any, dst: int, size: int, queue: HostQueue) -> None:
    queue.submit(_memmove, (dst, src, size))


def _fill(ptr: int, pattern: bytes, size: int) -> None:
    arr = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(ptr))
    n = len(pattern)
    if n in (1, 2, 4, 8) and ptr % n == 0:
        arr.view(f"u{n}").fill(np.frombuffer(pattern, dtype=f"u{n}")[0])
    else:
        arr.reshape(-1, n)[:] = np.frombuffer(pattern, dtype=np.uint8)


@hookimpl
def data_fill_impl(device: Any, queue: HostQueue, ptr: int, pattern: bytes, size: int) -> None:
    queue.submit(_fill, (ptr, pattern, size))


@hookimpl
def data_lock_impl(device: Any, ptr: int, size: int) -> int:
    return ptr  # the host device reaches all host memory: nothing to pin


# -- programs -----------------------------------------------------------------------------


@hookimpl
def load_binary_impl(context: Any, device: Any, image: bytes) -> HostProgram:
    from .elf import inspect_image

    info = inspect_image(image)
    # The memfd stays open while the program is loaded: the dynamic loader recognises an
    # already-loaded object by its path, and an open descriptor keeps /proc/self/fd/N unique.
    fd = os.memfd_create("pyoffload-image", os.MFD_CLOEXEC)
    try:
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view) :]
        lib = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except (OSError, UnicodeDecodeError) as exc:  # ctypes fails to decode an error naming a non-UTF-8 file
        os.close(fd)
        raise InvalidBinaryError(f"host backend: dlopen failed: {exc}") from None
    # The listing comes from the symbol table, lookups go through the hash table: an image whose
    # two disagree would list names that cannot be found.
    missing = [s.name for s in info.symbols if not _dlsym(lib._handle, s.name.encode())]
    if missing:
        _dlclose(lib._handle)
        os.close(fd)
        raise InvalidBinaryError(
            f"host backend: malformed ELF image: the loader's hash table does not find "
            f"the exported symbols {', '.join(missing)}"
        )
    return HostProgram(lib, info, fd)


@hookimpl
def unload_binary_impl(device: Any, program: HostProgram) -> None:
    # dlclose runs the image's ELF destructors, then unmaps it.
    failed = _dlclose(program.handle) != 0
    os.close(program.fd)
    if failed:
        raise UnsupportedError(f"host backend: dlclose failed: {(_dlerror() or b'?').decode()}")


@hookimpl
def get_symbols_impl(device: Any, program: HostProgram) -> Sequence[SymbolDesc]:
    # the data-parallel markers are this backend's, not the program's globals
    return [s for s in program.info.symbols if not s.name.startswith(PARALLEL_MARKER)]


@hookimpl
def get_kernel_impl(device: Any, program: HostProgram, name: str) -> HostKernel:
    fn = getattr(program.lib, name)
    fn.restype = None
    signature = program.info.signatures.get(name)
    abi = 0
    if program.info.find(PARALLEL_MARKER + name, SymbolKind.GLOBAL) is not None:
        abi = _runtime.ABI_GROUPS
        if signature is not None:
            signature = signature[1:]  # PYOFFLOAD_GROUPS is the backend's, not a launch argument
    elif signature and signature[-1] == "launch":
        abi = _runtime.ABI_CONTEXT
        signature = signature[:-1]  # the launch context is the backend's, not a launch argument
    if signature is not None and "launch" in signature:
        raise UnsupportedError(
            f"host backend: kernel {name!r}: a pyoffload_launch pointer must be the last parameter "
            "(the launch context), not a launch argument"
        )
    return HostKernel(fn, name, signature, abi, program)


@hookimpl
def kernel_signature_impl(device: Any, kernel: HostKernel) -> tuple[str, ...] | None:
    return kernel.signature


@hookimpl
def kernel_attributes_impl(device: Any, kernel: HostKernel) -> dict[str, Any]:
    program = kernel.program
    if program.frames is None:
        # read back from the image's memfd (kept open while the program is loaded): attributes
        # are rare, so the call frame information is decoded only when asked for
        size = os.fstat(program.fd).st_size
        from .elf import frame_sizes

        program.frames = frame_sizes(os.pread(program.fd, size, 0))
    return {
        "max_work_group_size": MAX_WORK_GROUP_SIZE,
        "preferred_work_group_multiple": PREFERRED_WORK_GROUP_MULTIPLE,
        # C has no static local memory: a kernel's local memory is its LocalMemory arguments
        "local_memory_bytes": 0,
        # a work-item's private variables live in the kernel's stack frame
        "private_memory_bytes": program.frames.get(kernel.name),
    }


@hookimpl
def get_global_impl(device: Any, program: HostProgram, name: str) -> tuple[int, int]:
    sym = program.info.find(name, SymbolKind.GLOBAL)
    assert sym is not None  # the generic layer asks only for listed globals
    return ctypes.addressof(ctypes.c_char.in_dll(program.lib, name)), sym.size


@hookimpl
def compile_impl(device: Any, source: str, options: tuple[str, ...]) -> bytes:
    from .compiler import DEFAULT_FLAGS, compile_c

    return compile_c(source, DEFAULT_FLAGS + tuple(options))  # the caller's options come last


@hookimpl
def compiler_id_impl(device: Any) -> str | None:
    from .compiler import compiler_id

    ident = compiler_id()
    return None if ident is None else f"{ident} ({_platform.machine()})"


# Build targets: images are ELF shared objects for this machine; no cross-compiling.
_TARGET = f"host:{_platform.machine()}"


@hookimpl
def build_target_impl(device: Any) -> str:
    return _TARGET


def _check_target(target: str) -> None:
    if target != _TARGET:
        raise InvalidArgumentError(f"the host backend builds for {_TARGET!r} only (this machine), not {target!r}")


@hookimpl
def target_compiler_id_impl(target: str, compiler: str | None) -> str | None:
    from .compiler import compiler_id, resolve

    _check_target(target)
    return f"{compiler_id(resolve(compiler))} ({_platform.machine()})"


@hookimpl
def target_compile_impl(target: str, source: str, options: tuple[str, ...], compiler: str | None) -> bytes:
    from .compiler import DEFAULT_FLAGS, compile_c, resolve

    _check_target(target)
    return compile_c(source, DEFAULT_FLAGS + tuple(options), resolve(compiler))


@hookimpl
def target_link_impl(target: str, sources: tuple[str, ...], options: tuple[str, ...], compiler: str | None) -> bytes:
    from .compiler import DEFAULT_FLAGS, link_c, resolve

    _check_target(target)
    return link_c(sources, DEFAULT_FLAGS + tuple(options), resolve(compiler))


# -- launches -----------------------------------------------------------------------------

_CTYPES = {
    "ptr": ctypes.c_void_p,
    "i8": ctypes.c_int8,
    "i16": ctypes.c_int16,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}


@hookimpl
def kernel_packer_impl(device: Any, kernel: HostKernel, kinds: tuple[str, ...]) -> Callable[[tuple[Any, ...]], Any]:
    if "f16" in kinds:
        raise UnsupportedError("host backend: C has no portable half-precision parameter type")
    if kernel.parallel:
        if any(struct_kind(kind) is not None for kind in kinds):
            # The native runtime places scalars and pointers in registers itself; a struct's
            # place depends on its members' classes (System V, AAPCS64), which it does not model.
            raise UnsupportedError(
                f"host backend: data-parallel kernel {kernel.name!r} takes a struct by value, which the native "
                "runtime cannot pass; pass it through memory, or declare the kernel as a plain C function"
            )
        # built (once per machine) when the first data-parallel kernel is launched
        _runtime.library()
        address = ctypes.cast(kernel.fn, ctypes.c_void_p).value or 0
        return _runtime.Layout(kernel.abi, kinds, kernel.name, address).pack
    if all(kind == "ptr" for kind in kinds):
        return _pointers
    # ctypes types take numpy scalars and Python numbers as they are (the generic layer has
    # range-checked them), so packing is one C-level map with no Python frame per argument.
    converters = tuple(
        _local if kind == "local" else _by_value if struct_kind(kind) is not None else _CTYPES[kind] for kind in kinds
    )

    def pack(values: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(map(operator.call, converters, values))

    return pack


def _by_value(value: Any) -> ctypes.Structure:
    """A struct passed by value as the ctypes structure of its numpy dtype: libffi then passes it
    in the registers or stack slots the C ABI gives its members (an int and a float share one
    integer register on x86-64, two floats an SSE one), as the compiled kernel expects."""
    return _struct_type(value.dtype).from_buffer_copy(value.tobytes())


@functools.lru_cache(maxsize=64)
def _struct_type(dtype: np.dtype) -> type[ctypes.Structure]:
    if dtype.fields:
        made: Any = np.ctypeslib.as_ctypes_type(dtype)
        if issubclass(made, ctypes.Structure) and ctypes.sizeof(made) == dtype.itemsize:
            return cast(type[ctypes.Structure], made)
    # Raw bytes (or a layout ctypes cannot mirror): a struct of bytes, passed as integer words.
    return type("by_value", (ctypes.Structure,), {"_fields_": [("bytes", ctypes.c_uint8 * dtype.itemsize)]})


def _pointers(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(map(ctypes.c_void_p, values))


def _local(local: Any) -> Any:
    return (ctypes.c_char * local.size)()  # fresh per launch: work-group scratch


def _run_parallel(kernel: HostKernel, desc: _runtime.Launch, threads: int) -> None:
    """One data-parallel launch, on its queue's worker thread: the native runtime runs every
    work-group on its threads (this one included) and returns when all have run."""
    trapped = ctypes.c_uint64()
    status = _runtime.run(_byref(desc), threads, _byref(trapped))  # loaded: the packer built it
    if status == _runtime.OK:
        return
    grid, block = tuple(desc.num_groups), tuple(desc.local_size)
    if status == _runtime.TRAPPED:
        what = "pyoffload_trap" if kernel.abi == _runtime.ABI_GROUPS else "pyoffload_launch_trap"
        raise OffloadError(
            f"host backend: kernel {kernel.name!r} trapped ({what}) in work-group "
            f"{trapped.value} of {grid[0] * grid[1] * grid[2]} (grid {grid}, block {block})"
        )
    raise OutOfResourcesError(
        f"host backend: kernel {kernel.name!r}: no memory for the local memory of a thread (grid {grid}, block {block})"
    )


@hookimpl
def launch_impl(device: Any, queue: HostQueue, kernel: HostKernel, grid: Any, block: Any, args: Any) -> None:
    if kernel.abi:
        _runtime.geometry(args, grid, block)
        queue.submit(_run_parallel, (kernel, args, _THREADS))
    else:
        queue.submit(kernel.fn, args)


@hookimpl
def launch_prepare_impl(
    device: Any, queue: HostQueue, kernel: HostKernel, grid: Any, block: Any, args: Any
) -> Callable[..., None]:
    submit = queue.submit
    if kernel.abi:
        geometry = _runtime.geometry
        geometry(args, grid, block)  # the runtime only reads the descriptor: it serves every repeat
        run = (kernel, args, _THREADS)

        def launch_parallel(new_args: Any = None) -> None:
            if new_args is None:
                submit(_run_parallel, run)
            else:  # new values: a descriptor of their own (the earlier launches may not have run)
                geometry(new_args, grid, block)
                submit(_run_parallel, (kernel, new_args, _THREADS))

        return launch_parallel
    fn = kernel.fn

    def launch(new_args: Any = None) -> None:
        submit(fn, args if new_args is None else new_args)

    return launch


@hookimpl
def queue_create_impl(context: Any, device: Any, profiling: bool) -> HostQueue:
    return HostQueue(profiling)


@hookimpl
def queue_destroy_impl(device: Any, queue: HostQueue) -> None:
    queue.close()


@hookimpl
def queue_synchronize_impl(device: Any, queue: HostQueue) -> None:
    queue.synchronize()


@hookimpl
def queue_query_impl(device: Any, queue: HostQueue) -> bool:
    return queue.idle()


@hookimpl
def enqueue_host_function_impl(device: Any, queue: HostQueue, fn: Callable[[], None]) -> bool:
    queue.submit(fn)
    return True


@hookimpl
def event_record_impl(device: Any, queue: HostQueue) -> HostEvent:
    return queue.marker()


@hookimpl
def event_wait_impl(device: Any, event: HostEvent) -> None:
    event.wait()
    if event.error is not None:
        event.queue.reported(event.error)
        raise event.error


@hookimpl
def event_query_impl(device: Any, event: HostEvent) -> bool:
    if not event.is_set():
        return False
    if event.error is not None:
        raise event.error
    return True


@hookimpl
def event_elapsed_impl(device: Any, start: HostEvent, end: HostEvent) -> float:
    return (end.stamp - start.stamp) * 1e3


@hookimpl
def event_profiling_impl(device: Any, start: HostEvent, end: HostEvent) -> dict[str, int]:
    # The marker before an operation is recorded as the operation is handed to the worker, which
    # takes it at once (queued = submitted), and stamped when the worker reaches the operation.
    queued = int(start.created * 1e9)
    return {"queued": queued, "submitted": queued, "started": int(start.stamp * 1e9), "ended": int(end.stamp * 1e9)}


# -- conformance --------------------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: Any) -> dict[str, bytes]:
    from .compiler import packaged_image

    return {"kernels": packaged_image("conformance_kernels"), "ctor_dtor": packaged_image("conformance_ctor_dtor")}
