"""``FakeHip``: a driver-level stand-in for hip-python's ``hip.hip`` module.

Modelled on grunnur's MockPyCUDA.  It has the same function names, argument order and
``(hipError_t, value...)`` return tuples as hip-python, so the plugin runs unchanged on it.
What it models, and checks:

* Devices: ``PYOFFLOAD_AMDGPU_FAKE_DEVICES`` (default 2) gfx90a devices, each peer-capable with
  the others; a per-thread current device (``hipSetDevice``), which ``hipMalloc``,
  ``hipModuleLoadData`` and the null stream use, as HIP does.
* Memory: a recorded address space (:mod:`.memory`) backed by real bytes, so copies round-trip;
  use-after-free, double free, overruns, device memory reached from another device without peer
  access, and frees with the wrong function are *violations*.
* Modules: loaded from the real code object: the fake reads its ELF symbols and metadata, so a
  kernel or global that is not in the image is ``hipErrorNotFound``, and globals start with the
  image's initial bytes.  Launches decode the packed kernarg buffer and run the emulations of
  :mod:`.kernels`.
* Streams and events run asynchronously (:mod:`.streams`); ``hipStreamWaitEvent`` orders a stream
  after an event of any device; ``hipLaunchHostFunc`` calls the real C function pointer on the
  stream's worker thread, and a HIP call made from that thread is a violation (HIP forbids it).
* Streams, events, modules and allocations belong to the device current on the calling thread
  when they are made (device 0 on a thread that never called ``hipSetDevice``), so a hook that
  forgets ``hipSetDevice`` fails here as it would on a GPU: an event recorded on a stream of
  another device is ``hipErrorInvalidHandle``.  ``hipFree``, ``hipHostFree``, ``hipHostUnregister``
  and ``hipModuleUnload`` wait for the device's streams first, as HIP does.
* Teardown (:meth:`FakeHip.teardown`) reports every allocation, registration, module, stream and
  event still alive as a leak.

Every violation is appended to :attr:`FakeHip.violations` (and the call returns the error code
the real runtime would, or the fault surfaces at the next synchronisation); tests assert the list
is empty.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import warnings
from collections.abc import Callable
from typing import Any, cast

from .. import codeobject
from ..codeobject import CodeObject, KernelInfo
from . import kernels as emulation
from .memory import DEVICE_BASE, AddressSpace, Fault, Kind, Region
from .streams import FakeEvent, FakeStream
from .types import (
    CONSTANTS,
    FakePointer,
    error_string,
    hipDeviceProp_t,
    hipError_t,
    hipMemcpyKind,
    hipMemoryAdvise,
    hipMemoryType,
    hipPointerAttribute_t,
)

DEVICES_ENV = "PYOFFLOAD_AMDGPU_FAKE_DEVICES"
MEMORY_ENV = "PYOFFLOAD_AMDGPU_FAKE_MEMORY"
FAKE_ARCH = "gfx90a:sramecc+:xnack-"
_MAX_LDS = 65536
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_MEMCPY_DEFAULT = int(hipMemcpyKind.hipMemcpyDefault)
_FROM_HOST = frozenset(map(int, (hipMemcpyKind.hipMemcpyHostToHost, hipMemcpyKind.hipMemcpyHostToDevice)))
_TO_HOST = frozenset(map(int, (hipMemcpyKind.hipMemcpyHostToHost, hipMemcpyKind.hipMemcpyDeviceToHost)))

E = hipError_t


class FakeHipWarning(ResourceWarning):
    """Leaks and violations found by the fake driver."""


class FakeModule:
    def __init__(self, device: int, code: CodeObject, region: Region | None, label: str) -> None:
        self.device = device
        self.code = code
        self.region = region
        self.label = label
        self.unloaded = False
        base = region.base - min(g.vaddr for g in code.globals.values()) if region else 0
        self.globals = {g.name: (base + g.vaddr, g.size) for g in code.globals.values()}

    def __repr__(self) -> str:
        return f"<FakeModule {self.label} device={self.device}>"


class FakeFunction:
    def __init__(self, module: FakeModule, info: KernelInfo) -> None:
        self.module = module
        self.info = info
        # Worked out once, as a GPU driver reads a kernel's descriptor once.
        self.kernarg_size = info.kernarg_size
        self.emulation = emulation.EMULATIONS.get(info.name)
        self.mismatch = self.emulation is not None and info.signature not in (None, self.emulation[0])

    def __repr__(self) -> str:
        return f"<FakeFunction {self.info.name} of {self.module.label}>"


class FakeHip:
    """One fake HIP runtime.  Attributes mirror ``hip.hip``; see the module docstring."""

    hipError_t = hipError_t
    hipMemcpyKind = hipMemcpyKind
    hipMemoryType = hipMemoryType
    hipMemoryAdvise = hipMemoryAdvise
    hipDeviceProp_t = hipDeviceProp_t
    hipPointerAttribute_t = hipPointerAttribute_t

    # hip-python's module-level constants: set on each instance from CONSTANTS
    HIP_LAUNCH_PARAM_BUFFER_POINTER: int
    HIP_LAUNCH_PARAM_BUFFER_SIZE: int
    HIP_LAUNCH_PARAM_END: int
    hipCpuDeviceId: int
    hipEventDefault: int
    hipEventBlockingSync: int
    hipEventDisableTiming: int
    hipHostMallocDefault: int
    hipHostMallocPortable: int
    hipHostMallocMapped: int
    hipHostRegisterDefault: int
    hipHostRegisterPortable: int
    hipHostRegisterMapped: int
    hipMemAttachGlobal: int
    hipMemAttachHost: int
    hipStreamDefault: int
    hipStreamNonBlocking: int

    instances: list[FakeHip] = []  # every fake made in this process, for end-of-run checks

    def __init__(
        self,
        device_count: int = 2,
        memory_per_device: int = 4 << 30,
        peer_capable: bool = True,
        separate_register_alias: bool = False,
    ) -> None:
        for name, value in CONSTANTS.items():
            setattr(self, name, value)
        self.device_count = device_count
        self.space = AddressSpace(device_count, memory_per_device)
        self.memory_per_device = memory_per_device
        self.peer_capable = peer_capable
        self.separate_register_alias = separate_register_alias
        self.peers: set[tuple[int, int]] = set()  # (accessor, owner) with peer access enabled
        self.violations: list[str] = []
        self.unknown_launches: list[str] = []
        self.calls: dict[str, int] = {}
        self.initialized = False
        self.torn_down = False
        self.lock = threading.RLock()
        self._local = threading.local()
        self._callback = threading.local()  # .active while a host function's callback runs
        self._streams: list[FakeStream] = []
        self._stream_addresses: dict[int, FakeStream] = {}
        self._events: list[FakeEvent] = []
        self._modules: list[FakeModule] = []
        self._registered: dict[int, Region] = {}  # host base -> alias region
        self._null_errors = dict.fromkeys(range(device_count), 0)
        self._labels = itertools.count(1)
        self.managed_advice: dict[int, list[tuple[int, int]]] = {}
        self.managed_location: dict[int, int] = {}

    @classmethod
    def from_environment(cls) -> FakeHip:
        """The fake the plugin uses under ``PYOFFLOAD_AMDGPU_DRIVER=fake``; remembered in
        :attr:`instances` so that the pytest plugin can check it at the end of the run."""
        fake = cls(
            device_count=int(os.environ.get(DEVICES_ENV, "2")),
            memory_per_device=int(os.environ.get(MEMORY_ENV, str(4 << 30))),
        )
        cls.instances.append(fake)
        return fake

    def __repr__(self) -> str:
        return f"<FakeHip {self.device_count} devices>"

    # -- helpers --------------------------------------------------------------------------

    def _violation(self, message: str) -> None:
        with self.lock:
            self.violations.append(message)

    def _fault(self, fault: Fault) -> E:
        """A misuse detected at call time: record it and return its error code."""
        self._violation(str(fault))
        return E(fault.err)

    def _count(self, name: str) -> None:
        if getattr(self._callback, "active", False):
            self._violation(f"{name} called from a hipLaunchHostFunc callback (HIP forbids HIP calls there)")
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1

    @property
    def current(self) -> int:
        return getattr(self._local, "device", 0)

    def _label(self, kind: str) -> str:
        return f"{kind}#{next(self._labels)}"

    def _stream(self, stream: Any, what: str) -> FakeStream | None:
        """Resolve a stream argument; ``None``/0 is the null stream.  Raises Fault if dead."""
        if stream is None or (isinstance(stream, int) and stream == 0):
            return None
        if isinstance(stream, int):  # an address, as hip-python accepts for any handle
            with self.lock:
                found = self._stream_addresses.get(stream)
            if found is None:
                raise Fault(E.hipErrorInvalidHandle, f"{what}: 0x{stream:x} is not a stream")
            stream = found
        if not isinstance(stream, FakeStream):
            raise TypeError(f"{what}: expected a stream handle, got {type(stream).__name__}")
        if stream.destroyed:
            raise Fault(E.hipErrorInvalidHandle, f"{what}: {stream.label} was destroyed")
        return stream

    def _submit(self, stream: FakeStream | None, op: Callable[[], None]) -> None:
        """Run ``op`` in stream order: on the worker, or now for the null stream."""
        if stream is not None:
            stream.enqueue(op)
            return
        try:
            op()
        except Fault as fault:
            self._violation(str(fault))
            device = self.current
            self._null_errors[device] = self._null_errors[device] or fault.err

    def _sync_device(self, device: int | None) -> None:
        """What hipFree does first: wait for the device's streams (all devices for None)."""
        for stream in list(self._streams):
            if not stream.destroyed and (device is None or stream.device == device):
                stream.wait()

    def _region_at(self, ptr: Any, what: str, kinds: tuple[Kind, ...]) -> Region:
        address = int(ptr)
        region = self.space.find(address)
        if region is None or region.base != address:
            raise Fault(E.hipErrorInvalidValue, f"{what}: 0x{address:x} is not the start of an allocation")
        if region.freed:
            raise Fault(E.hipErrorInvalidValue, f"{what}: double free / use after free of {region.label}")
        if region.kind not in kinds:
            raise Fault(E.hipErrorInvalidValue, f"{what}: {region.label} is {region.kind.value} memory")
        return region

    # -- initialisation and devices ---------------------------------------------------------

    def hipInit(self, flags: int) -> tuple[E]:
        self._count("hipInit")
        if flags != 0:
            return (E.hipErrorInvalidValue,)
        self.initialized = True
        return (E.hipSuccess,)

    def hipGetDeviceCount(self) -> tuple[E, int]:
        self._count("hipGetDeviceCount")
        return (E.hipSuccess, self.device_count) if self.device_count else (E.hipErrorNoDevice, 0)

    def hipSetDevice(self, deviceId: int) -> tuple[E]:  # noqa: N803 - hip-python's names
        self._count("hipSetDevice")
        if not 0 <= int(deviceId) < self.device_count:
            return (E.hipErrorInvalidDevice,)
        self._local.device = int(deviceId)
        return (E.hipSuccess,)

    def hipGetDevice(self) -> tuple[E, int]:
        return (E.hipSuccess, self.current)

    def hipDriverGetVersion(self) -> tuple[E, int]:
        return (E.hipSuccess, 60342134)

    def hipRuntimeGetVersion(self) -> tuple[E, int]:
        return (E.hipSuccess, 60342134)

    def hipGetDeviceProperties(self, deviceId: int) -> tuple[E, Any]:  # noqa: N803
        self._count("hipGetDeviceProperties")
        if not 0 <= int(deviceId) < self.device_count:
            return (E.hipErrorInvalidDevice, None)
        props = hipDeviceProp_t(
            name="AMD Instinct MI210 (pyoffload fake)",
            gcnArchName=FAKE_ARCH,
            totalGlobalMem=self.memory_per_device,
            multiProcessorCount=104,
            maxThreadsPerBlock=1024,
            maxThreadsDim=[1024, 1024, 1024],
            maxGridSize=[2147483647, 65536, 65536],
            sharedMemPerBlock=_MAX_LDS,
            warpSize=64,
            clockRate=1700000,
            managedMemory=1,
            pciBusID=0x10 + int(deviceId),
            memoryPoolsSupported=1,
        )
        return (E.hipSuccess, props)

    def hipGetErrorString(self, hipError: Any) -> tuple[E, bytes]:  # noqa: N803
        try:
            return (E.hipSuccess, error_string(E(int(hipError))))
        except ValueError:
            return (E.hipSuccess, b"unknown error")

    def hipDeviceCanAccessPeer(self, deviceId: int, peerDeviceId: int) -> tuple[E, int]:  # noqa: N803
        self._count("hipDeviceCanAccessPeer")
        if not (0 <= deviceId < self.device_count and 0 <= peerDeviceId < self.device_count):
            return (E.hipErrorInvalidDevice, 0)
        return (E.hipSuccess, int(self.peer_capable and deviceId != peerDeviceId))

    def hipDeviceEnablePeerAccess(self, peerDeviceId: int, flags: int) -> tuple[E]:  # noqa: N803
        self._count("hipDeviceEnablePeerAccess")
        device = self.current
        if flags != 0 or not 0 <= peerDeviceId < self.device_count or peerDeviceId == device:
            return (E.hipErrorInvalidDevice if flags == 0 else E.hipErrorInvalidValue,)
        if not self.peer_capable:
            return (E.hipErrorInvalidDevice,)
        with self.lock:
            if (device, peerDeviceId) in self.peers:
                return (E.hipErrorPeerAccessAlreadyEnabled,)
            self.peers.add((device, peerDeviceId))
        return (E.hipSuccess,)

    def hipDeviceDisablePeerAccess(self, peerDeviceId: int) -> tuple[E]:  # noqa: N803
        self._count("hipDeviceDisablePeerAccess")
        with self.lock:
            key = (self.current, peerDeviceId)
            if key not in self.peers:
                return (E.hipErrorPeerAccessNotEnabled,)
            self.peers.discard(key)
        return (E.hipSuccess,)

    def hipDeviceSynchronize(self) -> tuple[E]:
        self._sync_device(self.current)
        err = self._null_errors[self.current]
        self._null_errors[self.current] = 0
        return (E(err),)

    # -- allocation -----------------------------------------------------------------------

    def hipMalloc(self, size: int) -> tuple[E, Any]:
        self._count("hipMalloc")
        if size == 0:
            return (E.hipSuccess, FakePointer(0))
        with self.lock:
            try:
                region = self.space.allocate_device(self.current, int(size), self._label("hipMalloc"))
            except Fault as fault:
                return (E(fault.err), None)  # out of memory is an answer, not a misuse
        return (E.hipSuccess, FakePointer(region.base))

    def hipFree(self, ptr: Any) -> tuple[E]:
        self._count("hipFree")
        if ptr is None or int(ptr) == 0:
            return (E.hipSuccess,)
        with self.lock:
            try:
                region = self._region_at(ptr, "hipFree", (Kind.DEVICE, Kind.MANAGED))
            except Fault as fault:
                return (self._fault(fault),)
        self._sync_device(region.device)  # hipFree waits for the device, as in HIP
        with self.lock:
            self.space.release(region)
        return (E.hipSuccess,)

    def hipHostMalloc(self, size: int, flags: int) -> tuple[E, Any]:
        self._count("hipHostMalloc")
        if size == 0:
            return (E.hipSuccess, FakePointer(0))
        with self.lock:
            region = self.space.allocate_host(int(size), Kind.HOST, self._label("hipHostMalloc"))
        return (E.hipSuccess, FakePointer(region.base))

    def hipHostFree(self, ptr: Any) -> tuple[E]:
        self._count("hipHostFree")
        if ptr is None or int(ptr) == 0:
            return (E.hipSuccess,)
        with self.lock:
            try:
                region = self._region_at(ptr, "hipHostFree", (Kind.HOST,))
            except Fault as fault:
                return (self._fault(fault),)
        self._sync_device(None)
        with self.lock:
            self.space.release(region)
        return (E.hipSuccess,)

    def hipMallocManaged(self, size: int, flags: int) -> tuple[E, Any]:
        self._count("hipMallocManaged")
        if size == 0 or flags not in (self.hipMemAttachGlobal, self.hipMemAttachHost):
            return (E.hipErrorInvalidValue, None)
        with self.lock:
            region = self.space.allocate_host(int(size), Kind.MANAGED, self._label("hipMallocManaged"))
        return (E.hipSuccess, FakePointer(region.base))

    def hipMallocAsync(self, size: int, stream: Any) -> tuple[E, Any]:
        self._count("hipMallocAsync")
        try:
            fake_stream = self._stream(stream, "hipMallocAsync")
        except Fault as fault:
            return (self._fault(fault), None)
        device = fake_stream.device if fake_stream else self.current
        with self.lock:
            try:
                region = self.space.allocate_device(device, int(size), self._label("hipMallocAsync"))
            except Fault as fault:
                return (E(fault.err), None)
            region.stream_ordered = True
        return (E.hipSuccess, FakePointer(region.base))

    def hipFreeAsync(self, dev_ptr: Any, stream: Any) -> tuple[E]:
        self._count("hipFreeAsync")
        with self.lock:
            try:
                fake_stream = self._stream(stream, "hipFreeAsync")
                region = self._region_at(dev_ptr, "hipFreeAsync", (Kind.DEVICE,))
            except Fault as fault:
                return (self._fault(fault),)

        def free() -> None:
            with self.lock:
                if region.freed:
                    raise Fault(E.hipErrorInvalidValue, f"hipFreeAsync: {region.label} freed twice")
                self.space.release(region)

        self._submit(fake_stream, free)
        return (E.hipSuccess,)

    # -- host registration and pointer queries ----------------------------------------------

    def hipHostRegister(self, hostPtr: Any, sizeBytes: int, flags: int) -> tuple[E]:  # noqa: N803
        self._count("hipHostRegister")
        address, size = int(hostPtr), int(sizeBytes)
        if address == 0 or size == 0:
            return (E.hipErrorInvalidValue,)
        with self.lock:
            for base, alias in self._registered.items():
                if base < address + size and address < base + alias.size:
                    return (E.hipErrorHostMemoryAlreadyRegistered,)
            existing = self.space.find(address)
            if existing is not None and not existing.freed and existing.kind in (Kind.HOST, Kind.MANAGED):
                return (E.hipErrorHostMemoryAlreadyRegistered,)
            if address >= DEVICE_BASE:
                return (self._fault(Fault(E.hipErrorInvalidValue, f"hipHostRegister: 0x{address:x} is device memory")),)
            self._registered[address] = self.space.alias_host(
                address, size, self._label("hipHostRegister"), self.separate_register_alias
            )
        return (E.hipSuccess,)

    def hipHostUnregister(self, hostPtr: Any) -> tuple[E]:  # noqa: N803
        self._count("hipHostUnregister")
        with self.lock:
            alias = self._registered.pop(int(hostPtr), None)
            if alias is None:
                return (
                    self._fault(
                        Fault(
                            E.hipErrorHostMemoryNotRegistered,
                            f"hipHostUnregister: 0x{int(hostPtr):x} is not registered",
                        )
                    ),
                )
        self._sync_device(None)
        with self.lock:
            self.space.release(alias)
        return (E.hipSuccess,)

    def _registration(self, address: int) -> tuple[int, Region] | None:
        for base, alias in self._registered.items():
            if base <= address < base + alias.size:
                return base, alias
        return None

    def hipHostGetDevicePointer(self, hstPtr: Any, flags: int) -> tuple[E, Any]:  # noqa: N803
        self._count("hipHostGetDevicePointer")
        address = int(hstPtr)
        with self.lock:
            if flags != 0:
                return (E.hipErrorInvalidValue, None)
            found = self._registration(address)
            if found is not None:
                base, alias = found
                return (E.hipSuccess, FakePointer(alias.base + address - base))
            region = self.space.find(address)
            if region is not None and not region.freed and region.kind is Kind.HOST:
                return (E.hipSuccess, FakePointer(address))  # hipHostMalloc memory maps 1:1
        return (E.hipErrorInvalidValue, None)

    def hipPointerGetAttributes(self, ptr: Any) -> tuple[E, Any]:
        self._count("hipPointerGetAttributes")
        address = int(ptr)
        with self.lock:
            found = self._registration(address)
            if found is not None:
                base, alias = found
                return (
                    E.hipSuccess,
                    hipPointerAttribute_t(
                        hipMemoryType.hipMemoryTypeHost,
                        self.current,
                        FakePointer(alias.base + address - base),
                        FakePointer(address),
                        0,
                    ),
                )
            region = self.space.find(address)
            if region is None or region.freed:
                return (
                    E.hipSuccess,
                    hipPointerAttribute_t(
                        hipMemoryType.hipMemoryTypeUnregistered, -1, FakePointer(0), FakePointer(0), 0
                    ),
                )
            kind = {
                Kind.HOST: hipMemoryType.hipMemoryTypeHost,
                Kind.MANAGED: hipMemoryType.hipMemoryTypeManaged,
                Kind.ALIAS: hipMemoryType.hipMemoryTypeHost,
            }.get(region.kind, hipMemoryType.hipMemoryTypeDevice)
            host = FakePointer(address) if region.kind in (Kind.HOST, Kind.MANAGED) else FakePointer(0)
            device = region.device if region.device is not None else self.current
            return (
                E.hipSuccess,
                hipPointerAttribute_t(kind, device, FakePointer(address), host, int(region.kind is Kind.MANAGED)),
            )

    def hipMemGetAddressRange(self, dptr: Any) -> tuple[E, Any, int]:
        self._count("hipMemGetAddressRange")
        address = int(dptr)
        with self.lock:
            found = self._registration(address)
            if found is not None:
                return (E.hipSuccess, FakePointer(found[0]), found[1].size)
            region = self.space.find(address)
            if region is None or region.freed:
                return (E.hipErrorNotFound, None, 0)
            return (E.hipSuccess, FakePointer(region.base), region.size)

    # -- managed memory hints ---------------------------------------------------------------

    def _managed(self, ptr: Any, count: int, what: str) -> Region:
        region = self.space.find(int(ptr))
        if region is None or region.freed or region.kind is not Kind.MANAGED:
            raise Fault(E.hipErrorInvalidValue, f"{what}: 0x{int(ptr):x} is not managed memory")
        if int(ptr) + int(count) > region.end:
            raise Fault(E.hipErrorInvalidValue, f"{what}: range overruns {region.label}")
        return region

    def hipMemPrefetchAsync(self, dev_ptr: Any, count: int, device: int, stream: Any) -> tuple[E]:
        self._count("hipMemPrefetchAsync")
        with self.lock:
            try:
                fake_stream = self._stream(stream, "hipMemPrefetchAsync")
                region = self._managed(dev_ptr, count, "hipMemPrefetchAsync")
            except Fault as fault:
                return (self._fault(fault),)
            if device != self.hipCpuDeviceId and not 0 <= device < self.device_count:
                return (E.hipErrorInvalidDevice,)

        def migrate() -> None:
            with self.lock:
                self.managed_location[region.base] = device

        self._submit(fake_stream, migrate)
        return (E.hipSuccess,)

    def hipMemAdvise(self, dev_ptr: Any, count: int, advice: Any, device: int) -> tuple[E]:
        self._count("hipMemAdvise")
        with self.lock:
            try:
                region = self._managed(dev_ptr, count, "hipMemAdvise")
                hipMemoryAdvise(int(advice))
            except Fault as fault:
                return (self._fault(fault),)
            except ValueError:
                return (E.hipErrorInvalidValue,)
            self.managed_advice.setdefault(region.base, []).append((int(advice), device))
        return (E.hipSuccess,)

    # -- copies and fills -------------------------------------------------------------------

    def _side(self, pointer: Any, size: int, host: bool, what: str, writable: bool) -> memoryview:
        if host:
            return self.space.host_view(pointer, size, what, writable)
        return self.space.device_view(int(pointer), size, None, self.peers, what)

    def _is_device_side(self, pointer: Any) -> bool:
        if not isinstance(pointer, (int, FakePointer)):
            return False
        region = self.space.find(int(pointer))
        # An unregistered range mapped at its host address is plain pageable memory again.
        return region is not None and not (
            region.freed and region.kind is Kind.ALIAS and region.base == region.host_address
        )

    def _copy_op(self, dst: Any, src: Any, size: int, kind: Any, what: str) -> Callable[[], None]:
        kind = int(kind)  # compared as ints: an enum lookup would be a Python call per copy
        if kind == _MEMCPY_DEFAULT:
            dst_host, src_host = not self._is_device_side(dst), not self._is_device_side(src)
        else:
            src_host = kind in _FROM_HOST
            dst_host = kind in _TO_HOST
        # Validate now (HIP looks both pointers up at enqueue time) and again when it runs.
        self._side(dst, size, dst_host, what, True)
        self._side(src, size, src_host, what, False)

        def copy() -> None:
            target = self._side(dst, size, dst_host, what, True)
            target[:] = bytes(self._side(src, size, src_host, what, False))

        return copy

    def _memcpy(self, name: str, dst: Any, src: Any, size: int, kind: Any, stream: Any, sync: bool) -> tuple[E]:
        self._count(name)
        try:
            fake_stream = None if sync else self._stream(stream, name)
            op = self._copy_op(dst, src, int(size), kind, name)
        except Fault as fault:
            return (self._fault(fault),)
        self._submit(fake_stream, op)
        return (E.hipSuccess,)

    def hipMemcpy(self, dst: Any, src: Any, sizeBytes: int, kind: Any) -> tuple[E]:  # noqa: N803
        return self._memcpy("hipMemcpy", dst, src, sizeBytes, kind, None, True)

    def hipMemcpyAsync(self, dst: Any, src: Any, sizeBytes: int, kind: Any, stream: Any) -> tuple[E]:  # noqa: N803
        return self._memcpy("hipMemcpyAsync", dst, src, sizeBytes, kind, stream, False)

    def hipMemcpyHtoD(self, dst: Any, src: Any, sizeBytes: int) -> tuple[E]:  # noqa: N803
        return self._memcpy("hipMemcpyHtoD", dst, src, sizeBytes, hipMemcpyKind.hipMemcpyHostToDevice, None, True)

    def hipMemcpyDtoH(self, dst: Any, src: Any, sizeBytes: int) -> tuple[E]:  # noqa: N803
        return self._memcpy("hipMemcpyDtoH", dst, src, sizeBytes, hipMemcpyKind.hipMemcpyDeviceToHost, None, True)

    def _peer_copy(
        self, name: str, dst: Any, dst_device: int, src: Any, src_device: int, size: int, stream: Any
    ) -> tuple[E]:
        self._count(name)
        try:
            for address, device in ((dst, dst_device), (src, src_device)):
                region = self.space.find(int(address))
                if region is not None and region.device is not None and region.device != device:
                    raise Fault(
                        E.hipErrorInvalidValue, f"{name}: 0x{int(address):x} is on device {region.device}, not {device}"
                    )
            fake_stream = self._stream(stream, name)
            op = self._copy_op(dst, src, int(size), hipMemcpyKind.hipMemcpyDeviceToDevice, name)
        except Fault as fault:
            return (self._fault(fault),)
        self._submit(fake_stream, op)
        return (E.hipSuccess,)

    def hipMemcpyPeer(self, dst: Any, dstDeviceId: int, src: Any, srcDeviceId: int, sizeBytes: int) -> tuple[E]:  # noqa: N803
        return self._peer_copy("hipMemcpyPeer", dst, dstDeviceId, src, srcDeviceId, sizeBytes, None)

    def hipMemcpyPeerAsync(
        self,
        dst: Any,
        dstDeviceId: int,
        src: Any,
        srcDevice: int,
        sizeBytes: int,  # noqa: N803
        stream: Any,
    ) -> tuple[E]:
        return self._peer_copy("hipMemcpyPeerAsync", dst, dstDeviceId, src, srcDevice, sizeBytes, stream)

    @staticmethod
    def _at(pointer: Any, offset: int) -> Any:
        """``offset`` bytes into a pointer or a host buffer."""
        if isinstance(pointer, (int, FakePointer)):
            return int(pointer) + offset
        return memoryview(pointer).cast("B")[offset:]

    def hipMemcpy2DAsync(  # noqa: N802 - hip-python's name
        self, dst: Any, dpitch: int, src: Any, spitch: int, width: int, height: int, kind: Any, stream: Any
    ) -> tuple[E]:
        """``height`` rows of ``width`` bytes.  Documented: hipErrorInvalidPitchValue for a width
        above either pitch; each row's memory checked as a 1-D copy's is."""
        name = "hipMemcpy2DAsync"
        self._count(name)
        dpitch, spitch, width, height = int(dpitch), int(spitch), int(width), int(height)
        try:
            if width > dpitch or width > spitch:
                raise Fault(E.hipErrorInvalidPitchValue, f"{name}: width {width} exceeds a pitch ({dpitch}, {spitch})")
            fake_stream = self._stream(stream, name)
            rows = [
                self._copy_op(self._at(dst, y * dpitch), self._at(src, y * spitch), width, kind, name)
                for y in range(height)
            ]
        except Fault as fault:
            return (self._fault(fault),)

        def copy() -> None:
            for row in rows:
                row()

        self._submit(fake_stream, copy)
        return (E.hipSuccess,)

    def hipMemset2DAsync(  # noqa: N802
        self, dst: Any, pitch: int, value: int, width: int, height: int, stream: Any
    ) -> tuple[E]:
        """``height`` rows of ``width`` bytes set to the byte ``value``; hipErrorInvalidValue for a
        width above the pitch or memory that is not there."""
        name = "hipMemset2DAsync"
        self._count(name)
        pitch, width, height = int(pitch), int(width), int(height)
        byte = (int(value) & 0xFF).to_bytes(1, "little")
        try:
            if width > pitch:
                raise Fault(E.hipErrorInvalidValue, f"{name}: width {width} exceeds the pitch {pitch}")
            fake_stream = self._stream(stream, name)
            for y in range(height):
                self.space.device_view(int(dst) + y * pitch, width, None, self.peers, name)
        except Fault as fault:
            return (self._fault(fault),)

        def fill() -> None:
            for y in range(height):
                self.space.device_view(int(dst) + y * pitch, width, None, self.peers, name)[:] = byte * width

        self._submit(fake_stream, fill)
        return (E.hipSuccess,)

    def _memset(self, name: str, dest: Any, value: int, count: int, width: int, stream: Any, sync: bool) -> tuple[E]:
        self._count(name)
        size = int(count) * width
        pattern = (int(value) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        try:
            fake_stream = None if sync else self._stream(stream, name)
            self.space.device_view(int(dest), size, None, self.peers, name)
        except Fault as fault:
            return (self._fault(fault),)

        def fill() -> None:
            self.space.device_view(int(dest), size, None, self.peers, name)[:] = pattern * int(count)

        self._submit(fake_stream, fill)
        return (E.hipSuccess,)

    def hipMemsetD8(self, dest: Any, value: int, count: int) -> tuple[E]:
        return self._memset("hipMemsetD8", dest, value, count, 1, None, True)

    def hipMemsetD8Async(self, dest: Any, value: int, count: int, stream: Any) -> tuple[E]:
        return self._memset("hipMemsetD8Async", dest, value, count, 1, stream, False)

    def hipMemsetD16(self, dest: Any, value: int, count: int) -> tuple[E]:
        return self._memset("hipMemsetD16", dest, value, count, 2, None, True)

    def hipMemsetD16Async(self, dest: Any, value: int, count: int, stream: Any) -> tuple[E]:
        return self._memset("hipMemsetD16Async", dest, value, count, 2, stream, False)

    def hipMemsetD32(self, dest: Any, value: int, count: int) -> tuple[E]:
        return self._memset("hipMemsetD32", dest, value, count, 4, None, True)

    def hipMemsetD32Async(self, dst: Any, value: int, count: int, stream: Any) -> tuple[E]:
        return self._memset("hipMemsetD32Async", dst, value, count, 4, stream, False)

    # -- modules --------------------------------------------------------------------------

    def hipModuleLoadData(self, image: Any) -> tuple[E, Any]:
        self._count("hipModuleLoadData")
        try:
            data = bytes(memoryview(image).cast("B"))
        except TypeError:
            return (E.hipErrorInvalidValue, None)
        device = self.current
        try:
            code = codeobject.parse(data, codeobject.arch_name(FAKE_ARCH))
        except Exception:  # the real loader rejects what it cannot parse, without a crash
            return (E.hipErrorInvalidImage, None)
        if code.arch and code.arch != codeobject.arch_name(FAKE_ARCH):
            return (E.hipErrorNoBinaryForGpu, None)
        label = self._label("hipModuleLoadData")
        region = None
        with self.lock:
            if code.globals:
                low = min(g.vaddr for g in code.globals.values())
                high = max(g.vaddr + g.size for g in code.globals.values())
                try:
                    region = self.space.allocate_device(device, high - low, f"{label} globals", Kind.MODULE)
                except Fault as fault:
                    return (E(fault.err), None)
                for g in code.globals.values():
                    region.view(g.vaddr - low, g.size)[:] = g.initial
            module = FakeModule(device, code, region, label)
            self._modules.append(module)
        return (E.hipSuccess, module)

    def _module(self, module: Any, what: str) -> FakeModule:
        if not isinstance(module, FakeModule):
            raise TypeError(f"{what}: expected a module handle, got {type(module).__name__}")
        if module.unloaded:
            raise Fault(E.hipErrorInvalidHandle, f"{what}: {module.label} was unloaded")
        return module

    def hipModuleUnload(self, module: Any) -> tuple[E]:
        self._count("hipModuleUnload")
        try:
            fake = self._module(module, "hipModuleUnload")
        except Fault as fault:
            return (self._fault(fault),)
        self._sync_device(fake.device)  # kernels still running keep their code object
        with self.lock:
            fake.unloaded = True
            if fake.region is not None:
                self.space.release(fake.region)
        return (E.hipSuccess,)

    def hipModuleGetFunction(self, module: Any, kname: Any) -> tuple[E, Any]:
        self._count("hipModuleGetFunction")
        try:
            fake = self._module(module, "hipModuleGetFunction")
        except Fault as fault:
            return (self._fault(fault), None)
        name = kname.decode() if isinstance(kname, bytes) else str(kname)
        info = fake.code.kernels.get(name)
        if info is None:
            return (E.hipErrorNotFound, None)
        return (E.hipSuccess, FakeFunction(fake, info))

    def hipModuleGetGlobal(self, hmod: Any, name: Any) -> tuple[E, Any, int]:
        self._count("hipModuleGetGlobal")
        try:
            fake = self._module(hmod, "hipModuleGetGlobal")
        except Fault as fault:
            return (self._fault(fault), None, 0)
        key = name.decode() if isinstance(name, bytes) else str(name)
        if key not in fake.globals:
            return (E.hipErrorNotFound, None, 0)
        address, size = fake.globals[key]
        return (E.hipSuccess, FakePointer(address), size)

    # -- launches ---------------------------------------------------------------------------

    def _kernarg(self, extra: Any, f: FakeFunction) -> bytes:
        """Read the ``void*[5]`` extra array and the buffer it points to, as HIP does."""
        info, kernarg_size = f.info, f.kernarg_size
        if not isinstance(extra, int):
            raise Fault(
                E.hipErrorInvalidValue, "hipModuleLaunchKernel: the fake takes `extra` as the address of a void*[5]"
            )
        words = (ctypes.c_void_p * 5).from_address(extra)
        markers = (words[0], words[2], words[4])
        expected = (self.HIP_LAUNCH_PARAM_BUFFER_POINTER, self.HIP_LAUNCH_PARAM_BUFFER_SIZE, self.HIP_LAUNCH_PARAM_END)
        if markers != expected:
            raise Fault(E.hipErrorInvalidValue, f"hipModuleLaunchKernel: bad extra markers {markers}")
        # HIP follows the two pointers unchecked; a NULL one (None here) makes from_address a TypeError.
        buffer_at, size_at = cast(int, words[1]), cast(int, words[3])
        size = ctypes.c_size_t.from_address(size_at).value
        if size < kernarg_size:
            raise Fault(
                E.hipErrorInvalidValue,
                f"hipModuleLaunchKernel({info.name}): kernarg buffer of {size} bytes, "
                f"the kernel's explicit arguments need {kernarg_size}",
            )
        return (ctypes.c_char * size).from_address(buffer_at).raw if size else b""

    def hipModuleLaunchKernel(
        self,
        f: Any,
        gridDimX: int,
        gridDimY: int,
        gridDimZ: int,  # noqa: N803
        blockDimX: int,
        blockDimY: int,
        blockDimZ: int,
        sharedMemBytes: int,
        stream: Any,
        kernelParams: Any,
        extra: Any,
    ) -> tuple[E]:
        self._count("hipModuleLaunchKernel")
        if not isinstance(f, FakeFunction):
            raise TypeError(f"hipModuleLaunchKernel: expected a function handle, got {type(f).__name__}")
        grid = (int(gridDimX), int(gridDimY), int(gridDimZ))
        block = (int(blockDimX), int(blockDimY), int(blockDimZ))
        info = f.info
        try:
            module = self._module(f.module, "hipModuleLaunchKernel")
            fake_stream = self._stream(stream, "hipModuleLaunchKernel")
            device = fake_stream.device if fake_stream is not None else self.current
            if device != module.device:
                raise Fault(
                    E.hipErrorInvalidDeviceFunction,
                    f"hipModuleLaunchKernel({info.name}): module is on device {module.device}, "
                    f"launch is on device {device}",
                )
            if kernelParams is not None:
                raise Fault(E.hipErrorInvalidValue, "hipModuleLaunchKernel: kernelParams and extra both given")
            kernarg = self._kernarg(extra, f)
        except Fault as fault:
            return (self._fault(fault),)
        threads = block[0] * block[1] * block[2]
        if min(grid + block) < 1 or threads > info.max_flat_workgroup_size:
            return (E.hipErrorInvalidValue,)
        lds_size = info.group_segment_size + int(sharedMemBytes)
        if lds_size > _MAX_LDS:
            return (E.hipErrorInvalidValue,)
        args = emulation.decode(info, kernarg)
        known = f.emulation
        if f.mismatch:
            self._violation(
                f"{info.name}: image signature {info.signature} does not match the emulation's "
                f"{known[0] if known else None}"
            )
            known = None
        ctx = emulation.LaunchContext(
            self.space, device, self.peers, grid, block, bytearray(lds_size), module.globals, info.name
        )

        def run() -> None:
            if module.unloaded:
                raise Fault(E.hipErrorLaunchFailure, f"{info.name}: its module was unloaded before it ran")
            if known is None:
                with self.lock:
                    self.unknown_launches.append(info.name)
                return
            known[1](ctx, *args)

        self._submit(fake_stream, run)
        return (E.hipSuccess,)

    def hipLaunchHostFunc(self, stream: Any, fn: Any, userData: Any) -> tuple[E]:  # noqa: N803
        self._count("hipLaunchHostFunc")
        address = fn.value if isinstance(fn, ctypes.c_void_p) else fn
        if not address:
            return (E.hipErrorInvalidValue,)
        try:
            fake_stream = self._stream(stream, "hipLaunchHostFunc")
        except Fault as fault:
            return (self._fault(fault),)
        callback = _HOST_FN(int(address))
        data = None if userData is None else int(userData)

        def run() -> None:
            self._callback.active = True
            try:
                callback(data)
            finally:
                self._callback.active = False

        self._submit(fake_stream, run)
        return (E.hipSuccess,)

    # -- streams and events -----------------------------------------------------------------

    def hipStreamCreateWithFlags(self, flags: int) -> tuple[E, Any]:
        self._count("hipStreamCreateWithFlags")
        if flags not in (self.hipStreamDefault, self.hipStreamNonBlocking):
            return (E.hipErrorInvalidValue, None)
        address = 0x7F00_0000_0000 + 0x100 * len(self._streams)
        stream = FakeStream(self.current, int(flags), self._violation_from_fault, self._label("stream"), address)
        with self.lock:
            self._streams.append(stream)
            self._stream_addresses[address] = stream
        return (E.hipSuccess, stream)

    def hipStreamCreate(self) -> tuple[E, Any]:
        return self.hipStreamCreateWithFlags(self.hipStreamDefault)

    def _violation_from_fault(self, fault: Fault) -> None:
        self._violation(str(fault))

    def hipStreamDestroy(self, stream: Any) -> tuple[E]:
        self._count("hipStreamDestroy")
        try:
            fake = self._stream(stream, "hipStreamDestroy")
        except Fault as fault:
            return (self._fault(fault),)
        if fake is None:
            return (E.hipErrorInvalidHandle,)
        fake.stop()
        return (E.hipSuccess,)

    def hipStreamSynchronize(self, stream: Any) -> tuple[E]:
        self._count("hipStreamSynchronize")
        try:
            fake = self._stream(stream, "hipStreamSynchronize")
        except Fault as fault:
            return (self._fault(fault),)
        if fake is None:
            device = self.current
            err, self._null_errors[device] = self._null_errors[device], 0
            return (E(err),)
        fake.wait()
        return (E(fake.take_error()),)

    def hipStreamQuery(self, stream: Any) -> tuple[E]:
        self._count("hipStreamQuery")
        try:
            fake = self._stream(stream, "hipStreamQuery")
        except Fault as fault:
            return (self._fault(fault),)
        if fake is not None and fake.busy():
            return (E.hipErrorNotReady,)
        return (E.hipSuccess,)

    def _event(self, event: Any, what: str) -> FakeEvent:
        if not isinstance(event, FakeEvent):
            raise TypeError(f"{what}: expected an event handle, got {type(event).__name__}")
        if event.destroyed:
            raise Fault(E.hipErrorInvalidHandle, f"{what}: {event.label} was destroyed")
        return event

    def hipEventCreateWithFlags(self, flags: int) -> tuple[E, Any]:
        self._count("hipEventCreateWithFlags")
        if flags & ~(self.hipEventBlockingSync | self.hipEventDisableTiming):
            return (E.hipErrorInvalidValue, None)
        event = FakeEvent(self.current, int(flags), self._label("event"))
        with self.lock:
            self._events.append(event)
        return (E.hipSuccess, event)

    def hipEventCreate(self) -> tuple[E, Any]:
        return self.hipEventCreateWithFlags(self.hipEventDefault)

    def hipEventRecord(self, event: Any, stream: Any) -> tuple[E]:
        self._count("hipEventRecord")
        try:
            fake = self._event(event, "hipEventRecord")
            fake_stream = self._stream(stream, "hipEventRecord")
            device = fake_stream.device if fake_stream else self.current
            if device != fake.device:
                raise Fault(
                    E.hipErrorInvalidHandle,
                    f"hipEventRecord: {fake.label} of device {fake.device} on a stream of device {device}",
                )
        except Fault as fault:
            return (self._fault(fault),)
        self._submit(fake_stream, fake.arm(fake_stream))
        return (E.hipSuccess,)

    def hipStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[E]:
        self._count("hipStreamWaitEvent")
        try:
            fake_stream = self._stream(stream, "hipStreamWaitEvent")
            fake = self._event(event, "hipStreamWaitEvent")
        except Fault as fault:
            return (self._fault(fault),)
        if flags != 0 or fake_stream is None:
            return (E.hipErrorInvalidValue,)
        self._submit(fake_stream, fake.completion().wait)  # streams of any device may wait
        return (E.hipSuccess,)

    def hipEventSynchronize(self, event: Any) -> tuple[E]:
        self._count("hipEventSynchronize")
        try:
            fake = self._event(event, "hipEventSynchronize")
        except Fault as fault:
            return (self._fault(fault),)
        fake.wait()
        return (E(fake.error) if fake.error else E.hipSuccess,)

    def hipEventQuery(self, event: Any) -> tuple[E]:
        self._count("hipEventQuery")
        try:
            fake = self._event(event, "hipEventQuery")
        except Fault as fault:
            return (self._fault(fault),)
        if not fake.complete():
            return (E.hipErrorNotReady,)
        return (E(fake.error) if fake.error else E.hipSuccess,)

    def hipEventElapsedTime(self, start: Any, stop: Any) -> tuple[E, float]:
        self._count("hipEventElapsedTime")
        try:
            first, last = self._event(start, "hipEventElapsedTime"), self._event(stop, "hipEventElapsedTime")
        except Fault as fault:
            return (self._fault(fault), 0.0)
        if not (first.timing and last.timing and first.recorded and last.recorded):
            return (E.hipErrorInvalidHandle, 0.0)
        if not (first.complete() and last.complete()):
            return (E.hipErrorNotReady, 0.0)
        assert first.timestamp is not None and last.timestamp is not None
        return (E.hipSuccess, (last.timestamp - first.timestamp) * 1000.0)

    def hipEventDestroy(self, event: Any) -> tuple[E]:
        self._count("hipEventDestroy")
        try:
            fake = self._event(event, "hipEventDestroy")
        except Fault as fault:
            return (self._fault(fault),)
        fake.destroyed = True
        return (E.hipSuccess,)

    # -- teardown ---------------------------------------------------------------------------

    def leaks(self) -> list[str]:
        """Everything still alive: allocations, registrations, modules, streams, events."""
        with self.lock:
            found = [
                f"{r.label}: {r.size} bytes of {r.kind.value} memory at 0x{r.base:x}"
                for r in self.space.live()
                if r.kind is not Kind.MODULE
            ]
            found += [f"{m.label}: module not unloaded" for m in self._modules if not m.unloaded]
            found += [f"{s.label}: stream not destroyed" for s in self._streams if not s.destroyed]
            found += [f"{e.label}: event not destroyed" for e in self._events if not e.destroyed]
        return found

    def teardown(self) -> list[str]:
        """Report leaks as violations (and a warning), stop stream workers; return the leaks."""
        leaks = self.leaks()
        for stream in list(self._streams):
            if not stream.destroyed:
                stream.stop()
        with self.lock:
            self.violations.extend(f"leak: {leak}" for leak in leaks)
            self.torn_down = True
        if leaks or self.violations:
            warnings.warn(
                f"fake HIP driver: {len(self.violations)} violation(s): " + "; ".join(self.violations[:5]),
                FakeHipWarning,
                stacklevel=2,
            )
        return leaks
