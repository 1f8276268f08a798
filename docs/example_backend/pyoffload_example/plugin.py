"""The example backend: a device whose kernels are Python functions, run by worker threads.

It is the running example of ``docs/plugin-guide.md`` and implements hook contract v1 from
scratch, with nothing but the standard library and numpy:

* **The device** is one CPU device.  Its type is CPU, not HOST: pyoffload treats its memory as
  device memory and moves every byte through this backend's copy hooks, as it would for a GPU.
* **Memory** is host memory this backend allocates itself (numpy arrays, 64-byte aligned, kept
  alive by address in ``_memory``).  Kernels reach it through :func:`mem`.
* **Images** are Python source text starting with :data:`MAGIC`.  Loading one executes it in a
  fresh namespace, so two loads have independent globals.  The namespace provides the device
  library: ``@kernel``, ``@constructor``, ``@destructor``, ``global_var`` and ``mem``.  A kernel
  declares its parameter kinds as annotations (``def iota(out: "ptr", n: "i32")``), is called
  once per launch with the launch's arguments and loops over its work itself.
* **Queues** are worker threads running their work in order; **events** are markers the worker
  sets when it reaches them.  Enqueue hooks only put work on the thread's queue: they never block.

A kernel receives a pointer as an ``int``, a scalar as a numpy scalar of the declared type and
local memory as a fresh zeroed numpy ``uint8`` array.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import platform
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Any

import numpy as np

from pyoffload.backend import (
    PARAM_KINDS,
    AllocKind,
    CompileError,
    DeviceDesc,
    DeviceType,
    InitFini,
    InvalidBinaryError,
    LocalMemory,
    OutOfResourcesError,
    PlatformDesc,
    SymbolDesc,
    SymbolKind,
    hookimpl,
)

HOOK_API = (1, 0)  # the contract this module was written for (not imported: it must not follow upgrades)

# -- the device ---------------------------------------------------------------------------


class Device:
    """The backend's device handle: pyoffload passes it back as ``device`` to every hook."""

    name = "Python interpreter"


_DEVICE = Device()


@hookimpl
def init_impl() -> Sequence[PlatformDesc]:
    device = DeviceDesc(Device.name, "pyoffload example", DeviceType.CPU, _DEVICE)
    return [
        PlatformDesc("Python kernels", "pyoffload example", platform.python_version(), (device,), short_name="python")
    ]


@hookimpl
def deinit_impl() -> None:
    # Every allocation, program and queue was released through the other hooks before this call.
    return None


@hookimpl
def device_info_impl(device: Device) -> dict[str, Any]:
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "driver_version": platform.python_version(),
        "compute_units": 1,  # a queue runs one kernel at a time
        "max_work_group_size": 1024,
        "max_work_item_sizes": (1024,) * 3,
        "max_grid_size": (2**31 - 1,) * 3,
        "global_memory_bytes": memory,
        "local_memory_bytes": 64 * 1024,
        "max_alloc_bytes": memory,
        "address_bits": 64,
        "sub_group_size": 1,  # work-items run one after another
        "memory_kinds": ("DEVICE", "HOST", "MANAGED"),
        "example.implementation": platform.python_implementation(),
    }


# -- memory -------------------------------------------------------------------------------

ALIGNMENT = 64
_memory: dict[int, np.ndarray] = {}  # address -> the array that owns the bytes there
_memory_lock = threading.Lock()


def mem(ptr: int, dtype: Any, count: int) -> np.ndarray:
    """The ``count`` elements of ``dtype`` at address ``ptr`` as a numpy array, without a copy."""
    dtype = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (dtype.itemsize * int(count))).from_address(int(ptr)), dtype)


@hookimpl
def data_alloc_impl(context: Any, device: Device | None, size: int, kind: AllocKind) -> int:
    # Every kind is host memory here, so HOST and MANAGED are host-accessible as the contract asks.
    try:
        owner = np.empty(size + ALIGNMENT, np.uint8)
    except MemoryError:
        raise OutOfResourcesError(f"example backend: no memory for {size} bytes") from None
    base = owner.ctypes.data
    ptr = base + (-base % ALIGNMENT)
    with _memory_lock:
        _memory[ptr] = owner
    return ptr


@hookimpl
def data_free_impl(context: Any, device: Device | None, ptr: int, kind: AllocKind) -> None:
    with _memory_lock:
        del _memory[ptr]  # pyoffload frees only what data_alloc_impl returned


@hookimpl
def data_lock_impl(device: Device, ptr: int, size: int) -> int:
    return ptr  # this device reaches all host memory at its own address: nothing to pin


# The copies and fills run on the queue's worker thread; the enqueue hooks only submit them.


def _submit(dst: int, src: memoryview, size: int) -> None:
    mem(dst, np.uint8, size)[:] = np.frombuffer(src, np.uint8, size)


def _retrieve(dst: memoryview, src: int, size: int) -> None:
    np.frombuffer(dst, np.uint8, size)[:] = mem(src, np.uint8, size)


def _exchange(dst: int, src: int, size: int) -> None:
    mem(dst, np.uint8, size)[:] = mem(src, np.uint8, size)  # numpy copies overlapping ranges as memmove


def _fill(ptr: int, pattern: bytes, size: int) -> None:
    mem(ptr, np.uint8, size).reshape(-1, len(pattern))[:] = np.frombuffer(pattern, np.uint8)


@hookimpl
def data_submit_impl(device: Device, queue: Queue, dst: int, src: memoryview, size: int) -> None:
    queue.submit(_submit, (dst, src, size))


@hookimpl
def data_retrieve_impl(device: Device, queue: Queue, dst: memoryview, src: int, size: int) -> None:
    queue.submit(_retrieve, (dst, src, size))


@hookimpl
def data_exchange_impl(src_device: Device, src: int, dst_device: Device, dst: int, size: int, queue: Queue) -> None:
    queue.submit(_exchange, (dst, src, size))


@hookimpl
def data_fill_impl(device: Device, queue: Queue, ptr: int, pattern: bytes, size: int) -> None:
    queue.submit(_fill, (ptr, pattern, size))


# -- programs -----------------------------------------------------------------------------

MAGIC = b"# pyoffload-example image\n"
"""The first line of every image: how ``load_binary_impl`` tells an image from anything else."""


class Kernel:
    """A kernel handle: the Python function and its parameter kinds (from its annotations)."""

    __slots__ = ("fn", "signature")

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn
        params = inspect.signature(fn).parameters.values()
        for p in params:
            if p.annotation not in PARAM_KINDS:
                raise TypeError(f"kernel {fn.__name__}: annotate parameter {p.name!r} with one of {PARAM_KINDS}")
        self.signature = tuple(p.annotation for p in params)

    def __call__(self, *args: Any) -> None:
        """Run one launch (on a queue's worker): local memory becomes a fresh scratch array."""
        self.fn(*[np.zeros(a.size, np.uint8) if type(a) is LocalMemory else a for a in args])


class Program:
    """One loaded image: its namespace, kernels, entry points and globals."""

    def __init__(self, source: str) -> None:
        self.kernels: dict[str, Kernel] = {}
        self.init: list[str] = []
        self.fini: list[str] = []
        storage: list[np.ndarray] = []

        def kernel(fn: Callable[..., None]) -> Callable[..., None]:
            self.kernels[fn.__name__] = Kernel(fn)
            return fn

        def constructor(fn: Callable[..., None]) -> Callable[..., None]:
            self.init.append(fn.__name__)
            return kernel(fn)

        def destructor(fn: Callable[..., None]) -> Callable[..., None]:
            self.fini.append(fn.__name__)
            return kernel(fn)

        def global_var(dtype: Any, values: Any) -> np.ndarray:
            storage.append(np.array(values, dtype))  # a global's bytes live as long as the program
            return storage[-1]

        self.namespace: dict[str, Any] = {
            "np": np,
            "mem": mem,
            "kernel": kernel,
            "constructor": constructor,
            "destructor": destructor,
            "global_var": global_var,
        }
        try:
            # dont_inherit: this module's "from __future__ import annotations" must not reach the image
            exec(compile(source, "<image>", "exec", dont_inherit=True), self.namespace)
        except Exception as exc:
            raise CompileError(f"example backend: the image failed to load: {exc!r}", traceback.format_exc()) from None
        ids = {id(array) for array in storage}
        self.globals = {name: v for name, v in self.namespace.items() if id(v) in ids}


@hookimpl
def load_binary_impl(context: Any, device: Device, image: bytes) -> Program:
    if not image.startswith(MAGIC):
        raise InvalidBinaryError(f"example backend: not an image (an image starts with {MAGIC!r})")
    try:
        source = image.decode()
    except UnicodeDecodeError as exc:
        raise InvalidBinaryError(f"example backend: an image is UTF-8 text: {exc}") from None
    return Program(source)  # constructors run later: pyoffload launches them (global_init_fini_impl)


@hookimpl
def unload_binary_impl(device: Device, program: Program) -> None:
    # Drop the kernels, the globals and the image's namespace now, not when the handle goes.
    program.kernels.clear()
    program.globals.clear()
    program.namespace.clear()


@hookimpl
def global_init_fini_impl(device: Device, program: Program) -> InitFini:
    return InitFini(init=tuple(program.init), fini=tuple(program.fini))


@hookimpl
def get_symbols_impl(device: Device, program: Program) -> Sequence[SymbolDesc]:
    return [
        *(SymbolDesc(name, SymbolKind.KERNEL) for name in program.kernels),
        *(SymbolDesc(name, SymbolKind.GLOBAL, v.nbytes) for name, v in program.globals.items()),
    ]


@hookimpl
def get_kernel_impl(device: Device, program: Program, name: str) -> Kernel:
    return program.kernels[name]  # pyoffload asks only for names get_symbols_impl listed


@hookimpl
def kernel_signature_impl(device: Device, kernel: Kernel) -> tuple[str, ...]:
    return kernel.signature


@hookimpl
def kernel_attributes_impl(device: Device, kernel: Kernel) -> dict[str, Any]:
    return {"local_memory_bytes": 0}  # Python kernels have no static local memory


@hookimpl
def get_global_impl(device: Device, program: Program, name: str) -> tuple[int, int]:
    array = program.globals[name]
    return array.ctypes.data, array.nbytes


@hookimpl
def compile_impl(device: Device, source: str, options: tuple[str, ...]) -> bytes:
    try:
        compile(source, "<source>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        # The compiler's own line first, as C compilers write it: from_log puts it in the message.
        log = f"<source>:{exc.lineno}:{exc.offset}: error: {exc.msg}\n{traceback.format_exc()}"
        raise CompileError.from_log("example backend: the source does not compile", log) from None
    return MAGIC + source.encode()


@hookimpl
def compiler_id_impl(device: Device) -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


# -- queues, launches and events ----------------------------------------------------------


class Event:
    """A marker.  ``done`` is a lock held until the worker reaches the marker: waiting on a C-level
    lock runs no Python code, which keeps a synchronous operation's cost down."""

    __slots__ = ("done", "error", "stamp", "queue")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.error: BaseException | None = None  # the queue's failure no wait had raised yet, if any
        self.stamp = 0.0
        self.queue: Queue | None = None


class Queue:
    """An in-order queue: one worker thread runs the submitted ``(function, args)`` in order."""

    def __init__(self) -> None:
        self._work: SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = SimpleQueue()
        self._count = threading.Lock()  # submissions come from enqueues and from synchronize
        self.submitted = self.completed = 0
        self.error: BaseException | None = None  # the first failure of this queue's work
        self._thread = threading.Thread(target=self._run, name="pyoffload-example-queue", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...] = ()) -> None:
        with self._count:
            self.submitted += 1
            self._work.put((fn, args))

    def mark(self, event: Event) -> None:
        """Run by the worker when it reaches ``event``: everything submitted before has run."""
        event.stamp, event.error, event.queue = time.perf_counter(), self.error, self
        event.done.release()

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            try:
                item[0](*item[1])
            except BaseException as exc:  # reported by later events until a wait raised it
                if self.error is None:
                    self.error = exc
            self.completed += 1

    def close(self) -> None:
        self._work.put(None)
        if self._thread is not threading.current_thread():  # a host function may destroy its queue
            self._thread.join()


@hookimpl
def queue_create_impl(context: Any, device: Device, profiling: bool) -> Queue:
    return Queue()  # every event carries a timestamp, so a profiling queue needs nothing more


@hookimpl
def queue_destroy_impl(device: Device, queue: Queue) -> None:
    queue.close()


@hookimpl
def queue_synchronize_impl(device: Device, queue: Queue) -> None:
    # Wait for a marker: what other threads submit after it is not waited for.
    event_wait_impl(device, event_record_impl(device, queue))


@hookimpl
def queue_query_impl(device: Device, queue: Queue) -> bool:
    return queue.completed == queue.submitted


@hookimpl
def launch_impl(
    device: Device,
    queue: Queue,
    kernel: Kernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[Any, ...],
) -> None:
    queue.submit(kernel, args)


@hookimpl
def launch_prepare_impl(
    device: Device,
    queue: Queue,
    kernel: Kernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[Any, ...],
) -> Callable[[], None]:
    submit = queue.submit
    return lambda: submit(kernel, args)


@hookimpl
def enqueue_host_function_impl(device: Device, queue: Queue, fn: Callable[[], None]) -> bool:
    queue.submit(fn)  # the worker is our own thread: fn may call back into pyoffload
    return True


@hookimpl
def event_record_impl(device: Device, queue: Queue) -> Event:
    event = Event()
    queue.submit(queue.mark, (event,))
    return event


@hookimpl
def event_wait_impl(device: Device, event: Event) -> None:
    with event.done:  # acquired once the worker released it
        pass
    _raise_failure(event)


@hookimpl
def event_query_impl(device: Device, event: Event) -> bool:
    if event.done.locked():
        return False
    _raise_failure(event)
    return True


def _raise_failure(event: Event) -> None:
    """Raise what the event carries; once raised, markers reached later do not carry it."""
    if event.error is not None:
        if event.queue is not None and event.queue.error is event.error:
            event.queue.error = None
        raise event.error


@hookimpl
def event_elapsed_impl(device: Device, start: Event, end: Event) -> float:
    return (end.stamp - start.stamp) * 1e3


# -- the conformance suite ----------------------------------------------------------------


@hookimpl
def conformance_images_impl(device: Device) -> dict[str, bytes]:
    from .conformance import CTOR_DTOR, KERNELS

    return {"kernels": MAGIC + KERNELS.encode(), "ctor_dtor": MAGIC + CTOR_DTOR.encode()}
