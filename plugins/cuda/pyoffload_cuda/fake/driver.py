"""A driver-level fake of ``pycuda.driver`` (after grunnur's MockPyCUDA).

A :class:`FakeDriver` instance has the attributes of the ``pycuda.driver`` module that
pyoffload-cuda uses, with the same call signatures (a test checks both against the real
module), and behaves as the driver does where the plugin could get it wrong:

* contexts: one primary context per device, retained and detached; a per-thread stack of
  current contexts; every call that needs a current context fails without one; objects are
  tied to the context that made them and using them under another one fails
  ("wrong-context");
* memory: device addresses in reserved address space backed by host bytes, so copies round-trip;
  pinned, mapped and managed host memory at real host addresses; every pointer is resolved, so
  a use after free, an out-of-bounds range or an unknown pointer is an error, as is device
  memory of another device without peer access;
* work on streams runs lazily, when something synchronises with it (a stream, event or context
  synchronisation, a query, or a synchronous copy), in the order it was enqueued: a plugin that
  forgets to wait sees stale memory, as it could on a GPU;
* modules are read from the real image (cubin symbol table, PTX declarations, fatbin entries):
  a kernel or global that the image lacks is "named symbol not found"; globals live in device
  memory with the image's initial values; known conformance kernels run as Python emulations
  (:mod:`.kernels`), other launches are recorded in ``launches``;
* a kernel's bad memory access is sticky, as CUDA_ERROR_ILLEGAL_ADDRESS is: the context fails
  every later call;
* leaks: when a primary context is released, whatever still lives in it (allocations, modules,
  pinned ranges, streams, events) is reported in ``leaks`` and warned about.

Every misuse is also appended to ``violations`` as ``(kind, message)`` so tests can assert on it.

Configuration (read by :meth:`FakeDriver.from_environment`): ``PYOFFLOAD_CUDA_FAKE_DEVICES``
(default 2), ``PYOFFLOAD_CUDA_FAKE_ARCH`` (default ``sm_80``), ``PYOFFLOAD_CUDA_FAKE_MEMORY``
(bytes per device, default 1 GiB), ``PYOFFLOAD_CUDA_FAKE_PEER`` (``1``: devices can access each
other, the default).
"""

from __future__ import annotations

import gc
import itertools
import struct
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
from pyoffload import settings
from pyoffload.backend import InvalidBinaryError

from ..images import ImageFormat, demangle, detect_format, fatbin_entries
from . import kernels as emu
from .images import FakeImage, param_bytes, param_offsets, read_cubin, read_ptx
from .libcuda import FakeLibcuda
from .memory import Access, MemoryMap, Region, address_space, region_view

# cuGetErrorString() texts, as pycuda puts them in its messages.
INVALID_VALUE = "invalid argument"
INVALID_CONTEXT = "invalid device context"
INVALID_HANDLE = "invalid resource handle"
NOT_INITIALIZED = "initialization error"
OUT_OF_MEMORY = "out of memory"
INVALID_IMAGE = "device kernel image is invalid"
NO_BINARY = "no kernel image is available for execution on the device"
PTX_JIT = "a PTX JIT compilation failed"
NOT_FOUND = "named symbol not found"
ILLEGAL_ADDRESS = "an illegal memory access was encountered"
NOT_READY = "device not ready"
ALREADY_MAPPED = "part or all of the requested memory range is already mapped"
NOT_REGISTERED = "pointer does not correspond to a registered memory region"
PEER_UNSUPPORTED = "peer access is not supported between these two devices"
PEER_ENABLED = "peer access is already enabled"
PEER_NOT_ENABLED = "peer access has not been enabled"
INVALID_DEVICE = "invalid device ordinal"

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_SHARED_PER_BLOCK = 48 * 1024
MAX_PITCH = 2**31 - 1  # CU_DEVICE_ATTRIBUTE_MAX_PITCH of current GPUs
# How long work takes on the fake's timeline (seconds): a launch, plus what its emulation says;
# a copy or fill.
KERNEL_TIME = 20e-6
COPY_TIME = 5e-6


class FakeDriverWarning(UserWarning):
    """Leaks found when a fake primary context is released."""


class _Flags:
    def __init__(self, name: str, **values: int) -> None:
        self._name = name
        for k, v in values.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"<fake {self._name}>"

    if TYPE_CHECKING:  # the flags, set from the keywords

        def __getattr__(self, name: str) -> int: ...


_Order = Literal["K", "A", "C", "F"]  # numpy's memory layouts, as pycuda's *_empty take them

# The CUdevice_attribute values the plugin reads (same numbers as cuda.h).
DEVICE_ATTRIBUTES = {
    "MAX_THREADS_PER_BLOCK": 1,
    "MAX_BLOCK_DIM_X": 2,
    "MAX_BLOCK_DIM_Y": 3,
    "MAX_BLOCK_DIM_Z": 4,
    "MAX_GRID_DIM_X": 5,
    "MAX_GRID_DIM_Y": 6,
    "MAX_GRID_DIM_Z": 7,
    "MAX_SHARED_MEMORY_PER_BLOCK": 8,
    "MAX_PITCH": 11,
    "WARP_SIZE": 10,
    "CLOCK_RATE": 13,
    "MULTIPROCESSOR_COUNT": 16,
    "CAN_MAP_HOST_MEMORY": 19,
    "PCI_BUS_ID": 33,
    "UNIFIED_ADDRESSING": 41,
    "MANAGED_MEMORY": 83,
    "CONCURRENT_MANAGED_ACCESS": 89,
}
# CUfunction_attribute values.
FUNCTION_ATTRIBUTES = {
    "MAX_THREADS_PER_BLOCK": 0,
    "SHARED_SIZE_BYTES": 1,
    "CONST_SIZE_BYTES": 2,
    "LOCAL_SIZE_BYTES": 3,
    "NUM_REGS": 4,
}


class FakeDriver:
    """One fake driver instance: its own devices, contexts and memory map."""

    instances: list[FakeDriver] = []  # those the plugin used (from_environment), for the pytest plugin

    def __init__(
        self,
        devices: int = 2,
        arch: str = "sm_80",
        memory: int = 1 << 30,
        peer: bool = True,
        driver_version: int = 13000,
    ) -> None:
        if devices < 0:
            raise ValueError("devices must be >= 0")
        self.n_devices = devices
        self.sm = int(arch.removeprefix("sm_"))
        self.memory_per_device = memory
        self.peer = peer
        self.driver_version = driver_version
        self.lock = threading.RLock()
        self.memory = MemoryMap()
        self.initialised = False
        self.violations: list[tuple[str, str]] = []
        self.leaks: list[str] = []
        self.launches: list[tuple[str, tuple[int, int, int], tuple[int, int, int], tuple[Any, ...]]] = []
        self.calls: set[str] = set()  # driver entry points used (for the report of what ran)
        self._tls = threading.local()
        self._contexts: dict[int, Any] = {}
        self._seq = itertools.count(1)
        self._pending: list[tuple[int, Any, Callable[[], None], float, int]] = []  # (seq, context, op, due, id(stream))
        self._done_seq = 0
        self._due = 0.0  # when the last queued operation completes
        self.now = 0.0  # the due time of the operation that ran last (events take it as timestamp)
        self._used = [0] * devices
        self._build_namespace()
        self.libcuda = FakeLibcuda(self)  # not pycuda: the driver library the plugin calls through ctypes

    @classmethod
    def from_environment(cls) -> FakeDriver:
        drv = cls(
            devices=settings.integer("PYOFFLOAD_CUDA_FAKE_DEVICES", 2, minimum=0, maximum=64),
            arch=settings.text("PYOFFLOAD_CUDA_FAKE_ARCH", "sm_80"),
            memory=settings.integer("PYOFFLOAD_CUDA_FAKE_MEMORY", 1 << 30, minimum=1 << 20),
            peer=settings.flag("PYOFFLOAD_CUDA_FAKE_PEER", True),
        )
        cls.instances.append(drv)
        return drv

    # ------------------------------------------------------------------------------------
    # Errors and bookkeeping
    # ------------------------------------------------------------------------------------

    def _build_namespace(self) -> None:
        drv = self

        class Error(Exception):
            pass

        class MemoryError(Error):  # noqa: A001 - the pycuda name
            pass

        class LogicError(Error):
            pass

        class LaunchError(Error):
            pass

        class RuntimeError(Error):  # noqa: A001 - the pycuda name
            pass

        self.Error, self.MemoryError, self.LogicError = Error, MemoryError, LogicError
        self.LaunchError, self.RuntimeError = LaunchError, RuntimeError
        self.device_attribute = _Flags("device_attribute", **DEVICE_ATTRIBUTES)
        self.function_attribute = _Flags("function_attribute", **FUNCTION_ATTRIBUTES)
        self.host_alloc_flags = _Flags("host_alloc_flags", PORTABLE=1, DEVICEMAP=2, WRITECOMBINED=4)
        self.mem_host_register_flags = _Flags("mem_host_register_flags", PORTABLE=1, DEVICEMAP=2)
        self.mem_attach_flags = _Flags("mem_attach_flags", GLOBAL=1, HOST=2, SINGLE=4)
        self.event_flags = _Flags("event_flags", DEFAULT=0, BLOCKING_SYNC=1, DISABLE_TIMING=2, INTERPROCESS=4)
        # Classes bound to this driver instance.
        self.Device = type("Device", (_Device,), {"_drv": drv})
        self.Context = type("Context", (_Context,), {"_drv": drv})
        self.Stream = type("Stream", (_Stream,), {"_drv": drv})
        self.Event = type("Event", (_Event,), {"_drv": drv})
        self.Module = type("Module", (_Module,), {"_drv": drv})
        self.Memcpy2D = type("Memcpy2D", (_Memcpy2D,), {"_drv": drv})
        self.Memcpy3D = type("Memcpy3D", (_Memcpy3D,), {"_drv": drv})
        self.Function = type("Function", (_Function,), {"_drv": drv})
        self.DeviceAllocation = type("DeviceAllocation", (_DeviceAllocation,), {"_drv": drv})
        self.ManagedAllocation = type("ManagedAllocation", (_ManagedAllocation, self.DeviceAllocation), {"_drv": drv})
        self.HostAllocation = type("HostAllocation", (_HostAllocation,), {"_drv": drv})
        self.PagelockedHostAllocation = self.HostAllocation
        self.RegisteredHostMemory = type("RegisteredHostMemory", (_RegisteredHostMemory,), {"_drv": drv})

    def fail(
        self, cls: type[Exception], routine: str, text: str, detail: str = "", violation: str | None = None
    ) -> Exception:
        """An exception as pycuda formats it: ``<routine> failed: <text>[ - <detail>]``."""
        message = f"{routine} failed: {text}" + (f" - fake driver: {detail}" if detail else "")
        if violation:
            self.violations.append((violation, message))
        return cls(message)

    def _use(self, routine: str) -> None:
        self.calls.add(routine)

    def _require_init(self, routine: str) -> None:
        self._use(routine)
        if not self.initialised:
            raise self.fail(self.LogicError, routine, NOT_INITIALIZED, "cuInit was not called", "no-init")

    def _stack(self) -> list[Any]:
        stack = getattr(self._tls, "stack", None)
        if stack is None:
            stack = self._tls.stack = []
        return stack

    def current(self, routine: str) -> Any:
        """The current context, which must exist and be healthy."""
        self._require_init(routine)
        stack = self._stack()
        if not stack:
            raise self.fail(self.LogicError, routine, INVALID_CONTEXT, "no context is current", "no-context")
        ctx = stack[-1]
        ctx.check(routine)
        return ctx

    def _check_same(self, routine: str, obj: Any, ctx: Any, what: str) -> None:
        if obj._ctx is not ctx:
            raise self.fail(
                self.LogicError,
                routine,
                INVALID_HANDLE,
                f"{what} belongs to {obj._ctx!r} but {ctx!r} is current",
                "wrong-context",
            )

    def resolve(
        self, routine: str, addr: Any, size: int, ctx: Any | None = None, error: str = INVALID_VALUE
    ) -> tuple[Region, int]:
        """Resolve a device-accessible pointer or raise as the driver would."""
        try:
            region, offset = self.memory.resolve(int(addr), size)
        except Access as exc:
            raise self.fail(self.LogicError, routine, error, str(exc), exc.kind) from None
        if ctx is not None and not self.reachable(ctx, region):
            raise self.fail(
                self.LogicError,
                routine,
                error,
                f"0x{int(addr):x} is {region.describe()}, not reachable from {ctx!r}",
                "wrong-context",
            )
        return region, offset

    def reachable(self, ctx: Any, region: Region) -> bool:
        if not region.on_device:  # pinned/mapped/managed host memory: every device
            return True
        return region.context is ctx or region.context.device_index in ctx.peers

    # ------------------------------------------------------------------------------------
    # Lazy stream work
    # ------------------------------------------------------------------------------------

    def enqueue(self, ctx: Any, op: Callable[[], None], duration: float = 0.0, stream: Any = None) -> int:
        """Queue ``op``; it is due ``duration`` seconds after the work before it (one timeline
        for all streams), so queries answer "not ready" while it would still run."""
        with self.lock:
            seq = next(self._seq)
            self._due = max(self._due, time.perf_counter()) + duration
            # The stream by id: holding it would move its destruction to whichever thread drains.
            self._pending.append((seq, ctx, op, self._due, id(stream)))
            return seq

    def drain(self, upto: int | None = None, wait: bool = True) -> None:
        """Run pending work in order, up to and including ``upto`` (all when ``None``): waiting
        until each operation is due, or (``wait=False``, a query) only what is due already."""
        with self.lock:
            while self._pending and (upto is None or self._pending[0][0] <= upto):
                seq, ctx, op, due, _stream = self._pending[0]
                if due > time.perf_counter():
                    if not wait:
                        return
                    time.sleep(max(0.0, due - time.perf_counter()))
                self._pending.pop(0)
                self.now = due
                if ctx.sticky is None and ctx.alive:
                    try:
                        op()
                    except emu.IllegalAddress as exc:
                        ctx.sticky = self.fail(
                            self.LogicError, "cuCtxSynchronize", ILLEGAL_ADDRESS, str(exc), "illegal-address"
                        )
                # Drop the operation before its completion shows: a launch's closure holds its
                # module, and the last reference must not go on this (draining) thread after the
                # program was unloaded on its own (pycuda could not activate the context here).
                del op
                self._done_seq = seq

    def completed(self, seq: int) -> bool:
        return seq <= self._done_seq

    # ------------------------------------------------------------------------------------
    # Module-level functions of pycuda.driver
    # ------------------------------------------------------------------------------------

    def init(self, flags: int = 0) -> None:
        self._use("cuInit")
        if self.n_devices == 0:
            raise self.fail(self.RuntimeError, "cuInit", "no CUDA-capable device is detected")
        self.initialised = True

    def get_version(self) -> tuple[int, int, int]:
        return (self.driver_version // 1000, self.driver_version % 1000 // 10, 0)

    def get_driver_version(self) -> int:
        self._use("cuDriverGetVersion")
        return self.driver_version

    def mem_alloc(self, size: int) -> Any:
        routine = "cuMemAlloc"
        with self.lock:
            ctx = self.current(routine)
            size = int(size)
            if size <= 0:
                raise self.fail(self.LogicError, routine, INVALID_VALUE, f"size {size}", "bad-size")
            dev = ctx.device_index
            if self._used[dev] + size > self.memory_per_device:
                raise self.fail(self.MemoryError, routine, OUT_OF_MEMORY)
            base = address_space().take(size)
            region = Region(base, size, "device", ctx, data=bytearray(size))
            self.memory.add(region)
            self._used[dev] += size
            return self.DeviceAllocation(region)

    def _release_region(self, region: Region) -> None:
        with self.lock:
            self.memory.remove(region)
            if region.on_device:
                self._used[region.context.device_index] -= region.size

    def _host_region(self, routine: str, nbytes: int, kind: str, ctx: Any, owner: Any) -> Region:
        # Page-aligned host memory, as cuMemHostAlloc / cuMemAllocManaged return.
        raw = np.zeros(nbytes + 4096, np.uint8)
        offset = (-raw.ctypes.data) % 4096
        buf = raw[offset : offset + nbytes]
        region = Region(int(buf.ctypes.data), nbytes, kind, ctx, keepalive=buf)
        self.memory.add(region)
        return region

    def _empty(
        self, routine: str, cls: type, shape: Any, dtype: Any, order: _Order, mem_flags: int, kind: str
    ) -> np.ndarray:
        with self.lock:
            ctx = self.current(routine)
            dt = np.dtype(dtype)
            count = int(np.prod(shape)) if not isinstance(shape, int) else shape
            nbytes = max(count * dt.itemsize, 1)
            region = self._host_region(routine, nbytes, kind, ctx, None)
            holder: _HostMemory = cls(region, mem_flags)
            return holder._array(shape, dt, order)

    def pagelocked_empty(self, shape: Any, dtype: Any, order: _Order = "C", mem_flags: int = 0) -> np.ndarray:
        return self._empty("cuMemHostAlloc", self.HostAllocation, shape, dtype, order, mem_flags, "host")

    def managed_empty(self, shape: Any, dtype: Any, order: _Order = "C", mem_flags: int = 0) -> np.ndarray:
        return self._empty("cuMemAllocManaged", self.ManagedAllocation, shape, dtype, order, mem_flags, "managed")

    def register_host_memory(self, ary: Any, flags: int = 0) -> np.ndarray:
        routine = "cuMemHostRegister"
        with self.lock:
            ctx = self.current(routine)
            if not isinstance(ary, np.ndarray):
                raise self.fail(
                    self.LogicError,
                    "register_host_memory",
                    INVALID_VALUE,
                    "ary argument is not a numpy array",
                    "bad-argument",
                )
            if not ary.flags.c_contiguous:
                raise self.fail(
                    self.LogicError,
                    "register_host_memory",
                    INVALID_VALUE,
                    "ary argument is not contiguous",
                    "bad-argument",
                )
            if ary.base is not None:
                # pycuda makes the registration the base of a new array over the same memory;
                # numpy refuses when that array already inherited a base from ``ary``.
                self.violations.append(("array-base", "register_host_memory: the array has a base"))
                raise SystemError("Cannot set the NumPy array 'base' dependency more than once")
            region = self._register(routine, ctx, int(ary.ctypes.data), int(ary.nbytes), ary)
            holder: _HostMemory = self.RegisteredHostMemory(region, flags)
            return holder._array(ary.shape, ary.dtype, "C")

    def _register(self, routine: str, ctx: Any, base: int, size: int, keepalive: Any) -> Region:
        if address_space().contains(base):
            raise self.fail(self.LogicError, routine, INVALID_VALUE, "that is device memory", "bad-argument")
        clash = self.memory.find_live(base, size)
        if clash is not None:
            raise self.fail(self.LogicError, routine, ALREADY_MAPPED, clash.describe(), "double-register")
        region = Region(base, size, "registered", ctx, keepalive=keepalive)
        self.memory.add(region)
        return region

    def activate(self, ctx: Any, routine: str) -> None:
        """pycuda's ``scoped_context_activation`` before it releases an object of ``ctx``: fine
        where ``ctx`` is current, or on the thread that retained it (pycuda pushes it there);
        anywhere else pycuda refuses, and an object collected there leaks."""
        stack = self._stack()
        if ctx.alive and not (stack and stack[-1] is ctx) and ctx.thread != threading.get_ident():
            raise self.fail(
                self.LogicError,
                routine,
                "cannot activate out-of-thread context",
                f"{ctx!r} was retained on another thread and is not current here",
                "out-of-thread",
            )

    # -- copies and fills -------------------------------------------------------------------

    def _stream_ctx(self, routine: str, stream: Any, ctx: Any) -> None:
        if stream is not None:
            if not isinstance(stream, _Stream):
                raise TypeError(f"{routine}: stream must be a Stream, got {type(stream).__name__}")
            stream._check_alive(routine)
            self._check_same(routine, stream, ctx, "the stream")

    def _submit(
        self, routine: str, ctx: Any, stream: Any, op: Callable[[], None], sync: bool, duration: float = COPY_TIME
    ) -> None:
        """Enqueue ``op``; a synchronous call (legacy stream semantics) waits for all earlier
        work of the context first and completes before returning."""
        if sync:
            self.drain()
            ctx.check(routine)
            op()
        else:
            self.enqueue(ctx, op, duration, stream)

    @staticmethod
    def _host_bytes(buf: Any, routine: str, writable: bool) -> memoryview:
        mv = memoryview(buf)
        if not mv.contiguous:
            raise TypeError(f"{routine}: host buffer must be contiguous")
        if writable and mv.readonly:
            raise TypeError(f"{routine}: host buffer is read-only")
        return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv

    def _htod(self, routine: str, dest: Any, src: Any, stream: Any, sync: bool) -> None:
        with self.lock:
            ctx = self.current(routine)
            self._stream_ctx(routine, stream, ctx)
            data = bytes(self._host_bytes(src, routine, False))  # staged at the call
            region, off = self.resolve(routine, dest, len(data))

            def op() -> None:
                region_view(region, off, len(data))[:] = data

            self._submit(routine, ctx, stream, op, sync)

    def _dtoh(self, routine: str, dest: Any, src: Any, stream: Any, sync: bool) -> None:
        with self.lock:
            ctx = self.current(routine)
            self._stream_ctx(routine, stream, ctx)
            view = self._host_bytes(dest, routine, True)
            region, off = self.resolve(routine, src, view.nbytes)

            def op() -> None:
                view[:] = region_view(region, off, view.nbytes)

            self._submit(routine, ctx, stream, op, sync)

    def _dtod(
        self,
        routine: str,
        dest: Any,
        src: Any,
        size: int,
        stream: Any,
        sync: bool,
        dest_context: Any = None,
        src_context: Any = None,
    ) -> None:
        with self.lock:
            ctx = self.current(routine)
            self._stream_ctx(routine, stream, ctx)
            size = int(size)
            d_region, d_off = self.resolve(routine, dest, size)
            s_region, s_off = self.resolve(routine, src, size)
            for region, given, what in ((d_region, dest_context, "dest"), (s_region, src_context, "src")):
                if given is not None and region.on_device and region.context is not given:
                    raise self.fail(
                        self.LogicError,
                        routine,
                        INVALID_VALUE,
                        f"{what} is {region.describe()}, not memory of {given!r}",
                        "wrong-context",
                    )

            def op() -> None:
                region_view(d_region, d_off, size)[:] = bytes(region_view(s_region, s_off, size))

            self._submit(routine, ctx, stream, op, sync)

    def memcpy_htod(self, dest: Any, src: Any) -> None:
        self._htod("cuMemcpyHtoD", dest, src, None, True)

    def memcpy_htod_async(self, dest: Any, src: Any, stream: Any = None) -> None:
        self._htod("cuMemcpyHtoDAsync", dest, src, stream, False)

    def memcpy_dtoh(self, dest: Any, src: Any) -> None:
        self._dtoh("cuMemcpyDtoH", dest, src, None, True)

    def memcpy_dtoh_async(self, dest: Any, src: Any, stream: Any = None) -> None:
        self._dtoh("cuMemcpyDtoHAsync", dest, src, stream, False)

    def memcpy_dtod(self, dest: Any, src: Any, size: int) -> None:
        self._dtod("cuMemcpyDtoD", dest, src, size, None, True)

    def memcpy_dtod_async(self, dest: Any, src: Any, size: int, stream: Any = None) -> None:
        self._dtod("cuMemcpyDtoDAsync", dest, src, size, stream, False)

    def memcpy_peer(self, dest: Any, src: Any, size: int, dest_context: Any = None, src_context: Any = None) -> None:
        self._dtod("cuMemcpyPeer", dest, src, size, None, True, dest_context, src_context)

    def memcpy_peer_async(
        self, dest: Any, src: Any, size: int, dest_context: Any = None, src_context: Any = None, stream: Any = None
    ) -> None:
        self._dtod("cuMemcpyPeerAsync", dest, src, size, stream, False, dest_context, src_context)

    def _memset(self, width: int, dest: Any, data: int, size: int, stream: Any, sync: bool) -> None:
        routine = f"cuMemsetD{8 * width}" + ("" if sync else "Async")
        with self.lock:
            ctx = self.current(routine)
            self._stream_ctx(routine, stream, ctx)
            if int(dest) % width:
                raise self.fail(
                    self.LogicError,
                    routine,
                    INVALID_VALUE,
                    f"0x{int(dest):x} is not {width}-byte aligned",
                    "misaligned",
                )
            nbytes = int(size) * width
            region, off = self.resolve(routine, dest, nbytes)
            fill = int(data).to_bytes(width, "little") * int(size)

            def op() -> None:
                region_view(region, off, nbytes)[:] = fill

            self._submit(routine, ctx, stream, op, sync)

    def memset_d8(self, dest: Any, data: int, size: int) -> None:
        self._memset(1, dest, data, size, None, True)

    def memset_d16(self, dest: Any, data: int, size: int) -> None:
        self._memset(2, dest, data, size, None, True)

    def memset_d32(self, dest: Any, data: int, size: int) -> None:
        self._memset(4, dest, data, size, None, True)

    def memset_d8_async(self, dest: Any, data: int, size: int, stream: Any = None) -> None:
        self._memset(1, dest, data, size, stream, False)

    def memset_d16_async(self, dest: Any, data: int, size: int, stream: Any = None) -> None:
        self._memset(2, dest, data, size, stream, False)

    def memset_d32_async(self, dest: Any, data: int, size: int, stream: Any = None) -> None:
        self._memset(4, dest, data, size, stream, False)

    def _memset_2d(
        self, width: int, dest: Any, pitch: int, data: int, count: int, height: int, stream: Any, sync: bool
    ) -> None:
        """``cuMemsetD2D{8,16,32}[Async]``: ``height`` rows of ``count`` elements, ``pitch`` bytes
        apart.  Documented: the address and the pitch aligned to the element size, the pitch at
        least the row's bytes, else CUDA_ERROR_INVALID_VALUE."""
        routine = f"cuMemsetD2D{8 * width}" + ("" if sync else "Async")
        with self.lock:
            ctx = self.current(routine)
            self._stream_ctx(routine, stream, ctx)
            pitch, count, height = int(pitch), int(count), int(height)
            if int(dest) % width or pitch % width:
                raise self.fail(
                    self.LogicError,
                    routine,
                    INVALID_VALUE,
                    f"0x{int(dest):x} or pitch {pitch} is not {width}-byte aligned",
                    "misaligned",
                )
            row = count * width
            if pitch < row or pitch > MAX_PITCH:
                raise self.fail(self.LogicError, routine, INVALID_VALUE, f"pitch {pitch} for rows of {row} bytes")
            if not height or not count:
                return
            region, off = self.resolve(routine, dest, (height - 1) * pitch + row, ctx)
            fill = int(data).to_bytes(width, "little") * count

            def op() -> None:
                for y in range(height):
                    region_view(region, off + y * pitch, row)[:] = fill

            self._submit(routine, ctx, stream, op, sync)

    def memset_d2d8_async(self, dest: Any, pitch: int, data: int, width: int, height: int, stream: Any = None) -> None:
        self._memset_2d(1, dest, pitch, data, width, height, stream, False)

    def memset_d2d16_async(self, dest: Any, pitch: int, data: int, width: int, height: int, stream: Any = None) -> None:
        self._memset_2d(2, dest, pitch, data, width, height, stream, False)

    def memset_d2d32_async(self, dest: Any, pitch: int, data: int, width: int, height: int, stream: Any = None) -> None:
        self._memset_2d(4, dest, pitch, data, width, height, stream, False)

    def _copy_rect(self, routine: str, c: Any, stream: Any, sync: bool) -> None:
        """``cuMemcpy2D[Async]`` / ``cuMemcpy3D[Async]`` on a :class:`_Memcpy2D` description.
        Documented errors, CUDA_ERROR_INVALID_VALUE: a pitch above CU_DEVICE_ATTRIBUTE_MAX_PITCH,
        a row (``XInBytes + WidthInBytes``) longer than its pitch, (3D) rows beyond a slice's
        height; and, as every copy, memory that is not there or not reachable."""
        with self.lock:
            ctx = self.current(routine)
            self._stream_ctx(routine, stream, ctx)
            width, height = int(c.width_in_bytes), int(c.height)
            depth = int(c.depth) if c._3d else 1
            sides: list[tuple[Any, int, list[int]]] = []
            for side in ("src", "dst"):
                where = c._ends.get(side)
                if where is None:
                    raise self.fail(self.LogicError, routine, INVALID_VALUE, f"no {side} memory set", "no-memory")
                pitch, x, y = (
                    int(getattr(c, f"{side}_pitch")),
                    int(getattr(c, f"{side}_x_in_bytes")),
                    int(getattr(c, f"{side}_y")),
                )
                rows = int(getattr(c, f"{side}_height")) if c._3d else max(height + y, 1)
                z = int(getattr(c, f"{side}_z")) if c._3d else 0
                if pitch > MAX_PITCH or x + width > pitch:
                    raise self.fail(
                        self.LogicError, routine, INVALID_VALUE, f"{side}: x {x} + width {width} > pitch {pitch}"
                    )
                if y + height > rows:
                    raise self.fail(
                        self.LogicError, routine, INVALID_VALUE, f"{side}: y {y} + height {height} > height {rows}"
                    )
                first = x + y * pitch + z * rows * pitch
                offsets = [first + (k * rows + j) * pitch for k in range(depth) for j in range(height)]
                extent = offsets[-1] + width if offsets else 0
                kind, obj = where
                if kind == "host":
                    host = self._host_bytes(obj, routine, side == "dst")
                    if extent > host.nbytes:
                        raise self.fail(
                            self.LogicError,
                            routine,
                            INVALID_VALUE,
                            f"{side}: the region passes the host buffer",
                            "overrun",
                        )
                    sides.append((host, 0, offsets))
                else:
                    region, off = self.resolve(routine, obj, max(extent, 1), ctx)
                    sides.append((region, off, offsets))
            (src, s_off, s_rows), (dst, d_off, d_rows) = sides
            if isinstance(src, memoryview):  # pageable host memory is staged at the call
                src = memoryview(bytes(src))

            def view(where: Any, at: int) -> memoryview:
                return where[at : at + width] if isinstance(where, memoryview) else region_view(where, at, width)

            def op() -> None:
                for so, do in zip(s_rows, d_rows, strict=True):
                    view(dst, d_off + do)[:] = bytes(view(src, s_off + so))

            self._submit(routine, ctx, stream, op, sync)

    # -- modules ------------------------------------------------------------------------------

    def _pick_symbols(self, image: bytes) -> FakeImage:
        """Read the image as the driver would choose from it for this device."""
        routine = "cuModuleLoadDataEx"
        try:
            fmt = detect_format(image)
            if fmt is ImageFormat.CUBIN:
                syms = read_cubin(image)
                self._check_cubin_arch(syms.arch)
                return syms
            if fmt is ImageFormat.PTX:
                return self._check_ptx(read_ptx(image))
            entries = fatbin_entries(image)
        except InvalidBinaryError as exc:
            raise self.fail(self.LogicError, routine, INVALID_IMAGE, str(exc), "invalid-image") from None
        for entry in entries:  # machine code for this GPU first, then PTX to JIT
            if (
                entry.kind == "cubin"
                and entry.payload is not None
                and entry.arch // 10 == self.sm // 10
                and entry.arch <= self.sm
            ):
                return read_cubin(entry.payload)
        for entry in entries:
            if entry.kind == "ptx" and entry.payload is not None and entry.arch <= self.sm:
                return read_ptx(entry.payload)
        raise self.fail(
            self.RuntimeError,
            routine,
            NO_BINARY,
            f"no readable entry for sm_{self.sm} (compressed entries cannot be read by the fake)",
        )

    def _check_cubin_arch(self, arch: str | None) -> None:
        sm = int(arch.removeprefix("sm_")) if arch else self.sm
        if sm // 10 != self.sm // 10 or sm > self.sm:
            raise self.fail(
                self.RuntimeError, "cuModuleLoadDataEx", NO_BINARY, f"cubin for {arch}, device is sm_{self.sm}"
            )

    def _check_ptx(self, syms: FakeImage) -> FakeImage:
        sm = int(syms.arch.removeprefix("sm_").rstrip("af")) if syms.arch else 0
        if sm > self.sm:
            raise self.fail(
                self.LogicError,
                "cuModuleLoadDataEx",
                PTX_JIT,
                f"ptxas fatal: SM version specified by .target ({syms.arch}) is higher "
                f"than the device's (sm_{self.sm})",
            )
        return syms

    def module_from_buffer(self, buffer: Any, options: Any = None, message_handler: Any = None) -> Any:
        routine = "cuModuleLoadDataEx"
        with self.lock:
            ctx = self.current(routine)
            image = bytes(memoryview(buffer).cast("B"))
            try:
                syms = self._pick_symbols(image)
            except self.Error as exc:
                if message_handler is not None:
                    message_handler(False, "", str(exc))
                raise
            module = self.Module(ctx, syms)
            if message_handler is not None:
                message_handler(True, "fake driver: module loaded", "")
            return module

    def finish(self) -> None:
        """Called by the plugin at deinit: every context should have been released."""
        with self.lock:
            for ctx in self._contexts.values():
                if ctx.alive:
                    self._report_leaks(ctx, "still retained at deinit")

    def _report_leaks(self, ctx: Any, when: str) -> None:
        gc.collect()  # pycuda frees what nobody references; cycles are collected first
        found = [r.describe() for r in self.memory.live() if r.context is ctx and r.kind != "global"]
        found += [f"{type(o).__name__} {o!r}" for o in list(ctx.objects)]
        for item in found:
            message = f"{ctx!r} {when}: {item} was never released"
            self.leaks.append(message)
            warnings.warn(message, FakeDriverWarning, stacklevel=3)


# ------------------------------------------------------------------------------------------
# Classes (each FakeDriver makes subclasses bound to itself as ``_drv``)
# ------------------------------------------------------------------------------------------


class _Device:
    _drv: FakeDriver

    def __init__(self, ordinal: int) -> None:
        drv = self._drv
        drv._require_init("cuDeviceGet")
        if not 0 <= int(ordinal) < drv.n_devices:
            raise drv.fail(drv.LogicError, "cuDeviceGet", INVALID_DEVICE, f"ordinal {ordinal}")
        self.ordinal = int(ordinal)

    @classmethod
    def count(cls) -> int:
        cls._drv._require_init("cuDeviceGetCount")
        return cls._drv.n_devices

    def name(self) -> str:
        return f"Fake CUDA Device {self.ordinal} (sm_{self._drv.sm})"

    def pci_bus_id(self) -> str:
        return f"0000:{self.ordinal + 1:02x}:00.0"

    def compute_capability(self) -> tuple[int, int]:
        return (self._drv.sm // 10, self._drv.sm % 10)

    def total_memory(self) -> int:
        return self._drv.memory_per_device

    def get_attribute(self, attr: int) -> int:
        values = {
            1: MAX_THREADS_PER_BLOCK,
            2: MAX_BLOCK[0],
            3: MAX_BLOCK[1],
            4: MAX_BLOCK[2],
            5: MAX_GRID[0],
            6: MAX_GRID[1],
            7: MAX_GRID[2],
            8: MAX_SHARED_PER_BLOCK,
            10: 32,
            11: MAX_PITCH,
            13: 1410000,
            16: 108,
            19: 1,
            33: self.ordinal + 1,
            41: 1,
            83: 1,
            89: 1,
        }
        if int(attr) not in values:
            raise self._drv.fail(self._drv.LogicError, "cuDeviceGetAttribute", INVALID_VALUE, f"attribute {attr}")
        return values[int(attr)]

    def can_access_peer(self, dev: Any) -> bool:
        return self._drv.peer and dev.ordinal != self.ordinal

    def retain_primary_context(self) -> Any:
        drv = self._drv
        with drv.lock:
            drv._use("cuDevicePrimaryCtxRetain")
            ctx = drv._contexts.get(self.ordinal)
            if ctx is None or not ctx.alive:
                ctx = drv.Context(self.ordinal)
                drv._contexts[self.ordinal] = ctx
            ctx.retains += 1
            return ctx

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Device) and other.ordinal == self.ordinal

    def __hash__(self) -> int:
        return hash(self.ordinal)


class _Context:
    _drv: FakeDriver

    def __init__(self, device_index: int) -> None:
        self.device_index = device_index
        self.thread = threading.get_ident()  # pycuda remembers the thread a context was made on
        self.retains = 0
        self.alive = True
        self.sticky: Exception | None = None
        self.peers: set[int] = set()
        self.objects: weakref.WeakSet[Any] = weakref.WeakSet()  # streams, events, modules

    def __repr__(self) -> str:
        return f"<fake primary context of device {self.device_index}{'' if self.alive else ' (released)'}>"

    @property
    def handle(self) -> int:
        return 0x10000 + self.device_index  # a CUcontext stands for one primary context

    def check(self, routine: str) -> None:
        drv = self._drv
        if not self.alive:
            raise drv.fail(drv.LogicError, routine, INVALID_CONTEXT, f"{self!r} was released", "dead-context")
        if self.sticky is not None:
            raise type(self.sticky)(f"{routine} failed: {ILLEGAL_ADDRESS} (earlier: {self.sticky})")

    def push(self) -> None:
        drv = self._drv
        drv._use("cuCtxPushCurrent")
        if not self.alive:
            raise drv.fail(
                drv.LogicError, "cuCtxPushCurrent", INVALID_CONTEXT, f"{self!r} was released", "dead-context"
            )
        drv._stack().append(self)

    @classmethod
    def pop(cls) -> None:
        drv = cls._drv
        drv._use("cuCtxPopCurrent")
        stack = drv._stack()
        if not stack:
            raise drv.fail(
                drv.LogicError, "context::pop", INVALID_CONTEXT, "cannot pop non-current context", "no-context"
            )
        stack.pop()

    @classmethod
    def get_current(cls) -> Any:
        stack = cls._drv._stack()
        return stack[-1] if stack else None

    @classmethod
    def synchronize(cls) -> None:
        drv = cls._drv
        with drv.lock:
            ctx = drv.current("cuCtxSynchronize")
            drv.drain()
            ctx.check("cuCtxSynchronize")

    @classmethod
    def enable_peer_access(cls, peer: Any, flags: int = 0) -> None:
        drv = cls._drv
        with drv.lock:
            ctx = drv.current("cuCtxEnablePeerAccess")
            if not drv.peer or peer.device_index == ctx.device_index:
                raise drv.fail(drv.LogicError, "cuCtxEnablePeerAccess", PEER_UNSUPPORTED)
            if peer.device_index in ctx.peers:
                raise drv.fail(drv.LogicError, "cuCtxEnablePeerAccess", PEER_ENABLED)
            ctx.peers.add(peer.device_index)

    @classmethod
    def disable_peer_access(cls, peer: Any) -> None:
        drv = cls._drv
        with drv.lock:
            ctx = drv.current("cuCtxDisablePeerAccess")
            if peer.device_index not in ctx.peers:
                raise drv.fail(drv.LogicError, "cuCtxDisablePeerAccess", PEER_NOT_ENABLED)
            ctx.peers.discard(peer.device_index)

    def detach(self) -> None:
        drv = self._drv
        with drv.lock:
            drv._use("cuDevicePrimaryCtxRelease")
            if not self.alive or self.retains <= 0:
                raise drv.fail(
                    drv.LogicError, "cuDevicePrimaryCtxRelease", INVALID_CONTEXT, "not retained", "dead-context"
                )
            if self in drv._stack():
                raise drv.fail(
                    drv.LogicError,
                    "cuDevicePrimaryCtxRelease",
                    INVALID_CONTEXT,
                    "released while current on this thread",
                    "dead-context",
                )
            self.retains -= 1
            if self.retains == 0:
                drv.drain()
                drv._report_leaks(self, "released")
                self.alive = False
                self.peers.clear()


class _Stream:
    _drv: FakeDriver

    def __init__(self, flags: int = 0) -> None:
        drv = self._drv
        with drv.lock:
            self._ctx = drv.current("cuStreamCreate")
            self._ctx.objects.add(self)

    @property
    def handle(self) -> int:
        return id(self)

    def _check_alive(self, routine: str) -> None:
        self._ctx.check(routine)

    def wait_for_event(self, event: Any) -> None:
        """cuStreamWaitEvent: later work waits for ``event``, which may belong to another context.
        Work runs in submission order across all streams here, so the order holds already."""
        drv = self._drv
        routine = "cuStreamWaitEvent"
        with drv.lock:
            ctx = drv.current(routine)
            drv._stream_ctx(routine, self, ctx)
            if not isinstance(event, _Event):
                raise TypeError(f"{routine}: event must be an Event, got {type(event).__name__}")
            event._ctx.check(routine)

    def synchronize(self) -> None:
        drv = self._drv
        with drv.lock:
            drv._use("cuStreamSynchronize")
            self._ctx.check("cuStreamSynchronize")
            drv.drain()
            self._ctx.check("cuStreamSynchronize")

    def __del__(self) -> None:
        try:
            self._drv.activate(self._ctx, "cuStreamDestroy")
        except Exception:
            pass  # recorded as a violation; the stream leaks

    def is_done(self) -> bool:
        drv = self._drv
        with drv.lock:
            drv._use("cuStreamQuery")
            self._ctx.check("cuStreamQuery")
            drv.drain(wait=False)  # what is due has run, as on a GPU
            self._ctx.check("cuStreamQuery")
            return not any(p[4] == id(self) for p in drv._pending)


class _Event:
    _drv: FakeDriver

    def __init__(self, flags: int = 0) -> None:
        drv = self._drv
        with drv.lock:
            self._ctx = drv.current("cuEventCreate")
            self._ctx.objects.add(self)
        self.flags = int(flags)
        self._seq: int | None = None
        self._time: float | None = None

    def record(self, stream: Any = None) -> Any:
        drv = self._drv
        routine = "cuEventRecord"
        with drv.lock:
            ctx = drv.current(routine)
            self._check_ctx(routine, ctx)
            drv._stream_ctx(routine, stream, ctx)
            self._time = None

            me = weakref.ref(self)  # the queued record must not keep the event alive

            def op() -> None:
                event = me()
                if event is not None:
                    event._time = drv.now

            self._seq = drv.enqueue(ctx, op, stream=stream)
        return self

    def _check_ctx(self, routine: str, ctx: Any) -> None:
        self._drv._check_same(routine, self, ctx, "the event")

    def synchronize(self) -> Any:
        drv = self._drv
        with drv.lock:
            drv._use("cuEventSynchronize")
            self._ctx.check("cuEventSynchronize")
            if self._seq is not None:
                drv.drain(self._seq)
            self._ctx.check("cuEventSynchronize")
        return self

    def query(self) -> bool:
        drv = self._drv
        with drv.lock:
            drv._use("cuEventQuery")
            self._ctx.check("cuEventQuery")
            if self._seq is None:
                return True
            drv.drain(self._seq, wait=False)  # what is due has run, as on a GPU
            return drv.completed(self._seq)

    def time_till(self, event: Any) -> float:
        drv = self._drv
        routine = "cuEventElapsedTime"
        with drv.lock:
            drv._use(routine)
            for ev in (self, event):
                if ev.flags & drv.event_flags.DISABLE_TIMING:
                    raise drv.fail(
                        drv.LogicError, routine, INVALID_HANDLE, "event created with DISABLE_TIMING", "no-timing"
                    )
                if ev._seq is None or not drv.completed(ev._seq) or ev._time is None:
                    raise drv.fail(drv.LogicError, routine, NOT_READY, "event not completed")
            elapsed: float = (event._time - self._time) * 1000.0
            return elapsed

    def time_since(self, event: Any) -> float:
        elapsed: float = event.time_till(self)
        return elapsed

    def __del__(self) -> None:
        try:
            self._drv.activate(self._ctx, "cuEventDestroy")
        except Exception:
            pass  # recorded as a violation; the event leaks


class _DeviceAllocation:
    _drv: FakeDriver

    def __init__(self, region: Region) -> None:
        self._region = region
        self._valid = True

    def __int__(self) -> int:
        return self._region.base

    __index__ = __int__

    def free(self) -> None:
        drv = self._drv
        if not self._valid:
            raise drv.fail(drv.LogicError, "device_allocation::free", INVALID_HANDLE, "already freed", "double-free")
        drv._use("cuMemFree")
        drv.activate(self._region.context, "cuMemFree")
        self._valid = False
        drv._release_region(self._region)

    def __del__(self) -> None:
        # pycuda frees an allocation nobody references any more.
        try:
            if self._valid:
                self.free()
        except Exception:
            pass


class _HostMemory:
    """Shared part of the host allocations: numpy arrays are made over them with this object
    as their ``base``, as pycuda does."""

    _drv: FakeDriver
    _free_routine = "cuMemFreeHost"

    def __init__(self, region: Region, flags: int) -> None:
        self._region = region
        self._flags = int(flags)
        self._valid = True

    def _array(self, shape: Any, dtype: np.dtype, order: _Order) -> np.ndarray:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "version": 3,
            "data": (self._region.base, False),
        }
        return np.asarray(self, order=order)

    def get_device_pointer(self) -> int:
        drv = self._drv
        drv._use("cuMemHostGetDevicePointer")
        if not self._valid:
            raise drv.fail(drv.LogicError, "cuMemHostGetDevicePointer", INVALID_VALUE, "freed", "use-after-free")
        return self._region.base  # unified addressing: the host address

    def _release(self, routine: str) -> None:
        drv = self._drv
        if not self._valid:
            raise drv.fail(drv.LogicError, routine, INVALID_HANDLE, "already released", "double-free")
        drv._use(routine)
        drv.activate(self._region.context, routine)
        self._valid = False
        drv._release_region(self._region)

    def free(self) -> None:
        self._release(self._free_routine)

    def __del__(self) -> None:
        try:
            if self._valid:
                self._release(self._free_routine)
        except Exception:
            pass


class _HostAllocation(_HostMemory):
    def get_flags(self) -> int:
        return self._flags


class _ManagedAllocation(_HostMemory):
    _free_routine = "cuMemFree"

    def __int__(self) -> int:
        return self._region.base

    __index__ = __int__


class _RegisteredHostMemory(_HostMemory):
    _free_routine = "cuMemHostUnregister"

    def unregister(self) -> None:
        self._release("cuMemHostUnregister")

    def free(self) -> None:  # pragma: no cover - pycuda's name is unregister()
        raise AttributeError("RegisteredHostMemory has unregister(), not free()")


def _field(name: str) -> property:
    """A read-write integer field of a copy description (pycuda's are properties too)."""

    def get(self: Any) -> int:
        return int(self._fields.get(name, 0))

    def put(self: Any, value: Any) -> None:
        self._fields[name] = int(value)

    return property(get, put)


class _Memcpy2D:
    """pycuda's ``Memcpy2D``: a ``CUDA_MEMCPY2D`` filled in field by field, then called with a
    stream (``cuMemcpy2DAsync``) or without (``cuMemcpy2DUnaligned``)."""

    _drv: FakeDriver
    _3d = False

    src_x_in_bytes = _field("src_x_in_bytes")
    src_y = _field("src_y")
    src_pitch = _field("src_pitch")
    dst_x_in_bytes = _field("dst_x_in_bytes")
    dst_y = _field("dst_y")
    dst_pitch = _field("dst_pitch")
    width_in_bytes = _field("width_in_bytes")
    height = _field("height")

    def __init__(self) -> None:
        self._fields: dict[str, int] = {}
        self._ends: dict[str, tuple[str, Any]] = {}

    def set_src_host(self, buffer: Any) -> None:
        self._ends["src"] = ("host", buffer)

    def set_src_device(self, ptr: Any) -> None:
        self._ends["src"] = ("device", int(ptr))

    def set_dst_host(self, buffer: Any) -> None:
        self._ends["dst"] = ("host", buffer)

    def set_dst_device(self, ptr: Any) -> None:
        self._ends["dst"] = ("device", int(ptr))

    def __call__(self, stream: Any = None) -> None:
        name = "cuMemcpy3D" if self._3d else "cuMemcpy2D"
        if isinstance(stream, _Stream):
            self._drv._copy_rect(f"{name}Async", self, stream, False)
        else:  # pycuda's optional ``aligned`` flag in this position
            self._drv._copy_rect(name if self._3d or stream else f"{name}Unaligned", self, None, True)


class _Memcpy3D(_Memcpy2D):
    """pycuda's ``Memcpy3D`` (``CUDA_MEMCPY3D``): slices of ``src_height``/``dst_height`` rows."""

    _3d = True

    src_z = _field("src_z")
    src_height = _field("src_height")
    dst_z = _field("dst_z")
    dst_height = _field("dst_height")
    depth = _field("depth")


class _Module:
    _drv: FakeDriver

    def __init__(self, ctx: Any, symbols: FakeImage) -> None:
        drv = self._drv
        self._ctx = ctx
        self._symbols = symbols
        self._globals: dict[str, Region] = {}
        for name, init in symbols.globals.items():
            size = max(len(init), 1)
            region = Region(
                address_space().take(size), len(init), "global", ctx, data=bytearray(init.ljust(size, b"\0"))
            )
            drv.memory.add(region)
            self._globals[name] = region
        ctx.objects.add(self)
        drv._use("cuModuleLoadDataEx")

    def get_function(self, name: str) -> Any:
        drv = self._drv
        drv._use("cuModuleGetFunction")
        self._ctx.check("cuModuleGetFunction")
        if name not in self._symbols.kernels:
            raise drv.fail(drv.LogicError, "cuModuleGetFunction", NOT_FOUND, repr(name))
        return drv.Function(self, name)

    def get_global(self, name: str) -> tuple[int, int]:
        drv = self._drv
        drv._use("cuModuleGetGlobal")
        self._ctx.check("cuModuleGetGlobal")
        region = self._globals.get(name)
        if region is None:
            raise drv.fail(drv.LogicError, "cuModuleGetGlobal", NOT_FOUND, repr(name))
        return region.base, region.size

    def __del__(self) -> None:
        # cuModuleUnload: the module's globals go with it (unless pycuda cannot activate the context).
        try:
            drv = self._drv
            drv.activate(self._ctx, "cuModuleUnload")
            with drv.lock:
                for region in self._globals.values():
                    if not region.freed:
                        drv.memory.remove(region)
                self._globals = {}
        except Exception:
            pass


class _Function:
    _drv: FakeDriver

    def __init__(self, module: Any, name: str) -> None:
        self.module = module  # pycuda keeps the module alive as long as its functions
        self.name = name
        found = demangle(name)
        self.plain_name = found[0] if found else name  # emulations are known by the plain name
        self.param_sizes = module._symbols.kernels[name]
        self.param_aligns = module._symbols.param_aligns.get(name)
        self.max_threads: int = min(MAX_THREADS_PER_BLOCK, module._symbols.max_threads.get(name, MAX_THREADS_PER_BLOCK))
        self.arg_format = ""

    def prepare(self, arg_types: Any, texrefs: Any = None) -> Any:
        """pycuda's ``Function.prepare``: remember the struct format of the parameter buffer."""
        self.arg_format = ""
        for arg_type in arg_types:
            if isinstance(arg_type, str):
                self.arg_format += arg_type
            elif isinstance(arg_type, type) and issubclass(arg_type, np.number):
                self.arg_format += np.dtype(arg_type).char
            else:
                self.arg_format += np.dtype(np.uintp).char
        return self

    def prepared_async_call(self, grid: Any, block: Any, stream: Any, *args: Any, **kwargs: Any) -> None:
        """pycuda's ``Function.prepared_async_call(grid, block, stream, *args, shared_size=0)``."""
        shared = kwargs.pop("shared_size", 0)
        if kwargs:
            raise TypeError("unknown keyword arguments: " + ", ".join(kwargs.keys()))
        if not isinstance(block, tuple):
            raise TypeError("fake driver: pass the block size as a tuple")
        buffer = struct.pack(self.arg_format, *args)  # native mode, as pycuda's _pvt_struct
        self._launch(tuple(grid), block, buffer, int(shared), stream)

    def get_attribute(self, attr: int) -> int:
        drv = self._drv
        drv._use("cuFuncGetAttribute")
        values: dict[int, int] = {0: self.max_threads, 1: 0, 2: 0, 3: 0, 4: 16}  # 0: what __launch_bounds__ allows
        if int(attr) not in values:
            raise drv.fail(drv.LogicError, "cuFuncGetAttribute", INVALID_VALUE, f"attribute {attr}")
        return values[int(attr)]

    def _launch(self, grid: tuple[int, ...], block: tuple[int, ...], buffer: bytes, shared: int, stream: Any) -> None:
        drv = self._drv
        routine = "cuLaunchKernel"
        with drv.lock:
            ctx = drv.current(routine)
            drv._check_same(routine, self.module, ctx, f"kernel {self.name!r}")
            drv._stream_ctx(routine, stream, ctx)
            # Three long past the check below (zip strict refuses more than three dimensions).
            grid3 = cast(tuple[int, int, int], tuple(grid) + (1,) * (3 - len(grid)))
            block3 = cast(tuple[int, int, int], tuple(block) + (1,) * (3 - len(block)))
            if (
                any(int(g) <= 0 or int(g) > m for g, m in zip(grid3, MAX_GRID, strict=True))
                or any(int(b) <= 0 or int(b) > m for b, m in zip(block3, MAX_BLOCK, strict=True))
                or block3[0] * block3[1] * block3[2] > self.max_threads  # the device's, or __launch_bounds__
            ):
                raise drv.fail(drv.LogicError, routine, INVALID_VALUE, f"grid {grid3} block {block3}", "bad-dimensions")
            if shared > MAX_SHARED_PER_BLOCK:
                raise drv.fail(
                    drv.LogicError, routine, INVALID_VALUE, f"{shared} bytes of shared memory", "bad-dimensions"
                )
            sizes = self.param_sizes
            aligns = self.param_aligns
            if sizes is not None and len(buffer) != param_bytes(sizes, aligns):
                raise drv.fail(
                    drv.LogicError,
                    routine,
                    INVALID_VALUE,
                    f"{self.name} takes {param_bytes(sizes, aligns)} bytes of parameters {sizes}, got {len(buffer)}",
                    "argument-size",
                )
            # The parameters as the kernel reads them: raw bytes at their natural offsets.
            args = (
                tuple(buffer[o : o + n] for o, n in zip(param_offsets(sizes, aligns), sizes, strict=True))
                if sizes is not None
                else (buffer,)
            )
            drv.launches.append((self.plain_name, grid3, block3, args))
            globals_ = {n: r.base for n, r in self.module._globals.items()}
            fn = emu.emulation_for(self.plain_name, globals_)
            if fn is None:
                return_op: Callable[[], None] = lambda: None  # noqa: E731 - recorded only
            else:
                launch = emu.Launch(self.plain_name, grid3, block3, shared, args, globals_)
                memory = _LaunchMemory(drv, ctx)
                module = self.module  # keep the globals alive until the launch ran

                def return_op() -> None:
                    assert module is not None
                    fn(memory, launch)

            duration = KERNEL_TIME + (emu.duration(launch) if fn is not None else 0.0)
            drv._submit(routine, ctx, stream, return_op, sync=False, duration=duration)


class _LaunchMemory(emu.Memory):
    """Device memory as a kernel on ``ctx`` sees it: bad accesses are illegal addresses."""

    def __init__(self, drv: FakeDriver, ctx: Any) -> None:
        self.drv = drv
        self.ctx = ctx

    def _view(self, addr: int, size: int) -> memoryview:
        try:
            region, off = self.drv.memory.resolve(addr, size)
        except Access as exc:
            self.drv.violations.append((exc.kind, f"kernel access: {exc}"))
            raise emu.IllegalAddress(str(exc)) from None
        if not self.drv.reachable(self.ctx, region):
            message = f"0x{addr:x} is {region.describe()}, not reachable from {self.ctx!r} (no peer access)"
            self.drv.violations.append(("wrong-context", f"kernel access: {message}"))
            raise emu.IllegalAddress(message)
        return region_view(region, off, size)

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self._view(addr, size))

    def write(self, addr: int, data: bytes) -> None:
        self._view(addr, len(data))[:] = data
