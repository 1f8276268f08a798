"""The public objects that tie the layers together, and starting the runtime.

:class:`Device` and :class:`Context` are the generic device and context with the factories of the
layers above them (memory, programs, queues, pinning).  :func:`runtime` starts the runtime on
first use: settings, plugin discovery, each backend's ``init_impl``, the device selector, then the
platform and device objects, host device last.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import runtime as _runtime
from .build import build_program
from .context import GenericContext
from .device import GenericDevice, Platform
from .enums import AllocKind, DeviceType
from .errors import NoDevicesError, NotFoundError
from .hooks.discovery import HOST_BACKEND, Backend, PluginReport, load_backends
from .memory import Allocation, allocate, device_alloc
from .pinning import lock, unlock
from .program import Program
from .queue import Queue
from .runtime import Runtime
from .settings import Settings

if TYPE_CHECKING:
    from .backend import PlatformDesc
    from .pool import CachingAllocator, PoolStats


class MemoryPool:
    """The caching allocator of one (context, device, kind): statistics and controls.

    ``stats()`` reports bytes in use, cached and reserved (with peaks), segments and counters;
    ``trim(keep=0)`` gives cached segments back to the backend; ``limit`` caps the bytes reserved
    from the backend (``None``: no cap; beyond it an allocation first trims, then fails with
    ``OUT_OF_RESOURCES``); ``max_request`` bounds the sizes the pool serves (``None``: every size;
    0: the pool is off and every allocation goes straight to the backend).
    """

    def __init__(self, allocator: CachingAllocator, where: str) -> None:
        self._allocator = allocator
        self._where = where

    def stats(self) -> PoolStats:
        return self._allocator.stats()

    def trim(self, keep: int = 0) -> int:
        """Release cached memory until at most ``keep`` bytes stay cached; the bytes released."""
        return self._allocator.trim(keep)

    @property
    def limit(self) -> int | None:
        return self._allocator.limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        value = None if value is None else operator.index(value)
        with self._allocator.lock:
            self._allocator.limit = value

    @property
    def max_request(self) -> int | None:
        return self._allocator.max_request

    @max_request.setter
    def max_request(self, value: int | None) -> None:
        value = None if value is None else operator.index(value)
        with self._allocator.lock:
            self._allocator.max_request = value

    @property
    def enabled(self) -> bool:
        return self._allocator.enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        with self._allocator.lock:
            if on and not self._allocator.enabled:
                self._allocator.max_request = None
            elif not on:
                self._allocator.max_request = 0
        if not on:
            self._allocator.trim()

    def __repr__(self) -> str:
        s = self.stats()
        return f"<pyoffload.MemoryPool {self._where}: {s.in_use_bytes} in use, {s.cached_bytes} cached>"


class Context(GenericContext):
    """Devices of one platform sharing memory: ``Context([dev0, dev1])`` (the host device is
    implicit; listing it is harmless).  Closing it (``close()`` or leaving a ``with`` block)
    releases everything made in it."""

    def alloc(
        self,
        size: int,
        kind: AllocKind = AllocKind.DEVICE,
        device: GenericDevice | None = None,
        alignment: int | None = None,
    ) -> Allocation:
        """Allocate ``size`` bytes of ``kind``; ``device`` defaults to the context's first device
        (HOST memory has none).  ``alignment`` (a power of two) makes the address a multiple of it."""
        return allocate(self, device, size, kind, None, alignment)

    def memory_pool(self, device: GenericDevice | None = None, kind: AllocKind = AllocKind.DEVICE) -> MemoryPool:
        """The pool of ``kind`` memory on ``device`` (the first device by default; none for HOST)."""
        if kind is AllocKind.HOST:
            device = None
        else:
            device = device or self.devices[0]
            self.check_device(device, "memory_pool")
        where = f"{kind.name} memory of {device.id if device else self.backend + ' host'}"
        return MemoryPool(self.pool(device, kind), where)

    def create_queue(self, device: GenericDevice | None = None, profiling: bool = False) -> Queue:
        return Queue(self, device or self.devices[0], profiling)

    def load_program(self, device: GenericDevice, image: bytes | bytearray | memoryview) -> Program:
        return Program(self, device, image)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Device(GenericDevice):
    """One device of one backend.  ``backend`` names the backend; ``handle`` is its own object."""

    @property
    def default_context(self) -> Context:
        """The context of all this device's platform devices, used by ``Device.alloc`` and the
        other factories below."""
        ctx = self.platform.default_context_slot
        if ctx is None or not ctx.alive:
            with self.rt.lock:
                ctx = self.platform.default_context_slot
                if ctx is None or not ctx.alive:
                    ctx = self.platform.default_context_slot = Context(self.platform.devices)
        return ctx  # type: ignore[no-any-return]

    def alloc(self, size: int, kind: AllocKind = AllocKind.DEVICE, alignment: int | None = None) -> Allocation:
        """Allocate in the default context; HOST memory belongs to no device.  ``alignment`` (a
        power of two) makes the address a multiple of it."""
        return device_alloc(self, size, kind, alignment)

    def memory_pool(self, kind: AllocKind = AllocKind.DEVICE) -> MemoryPool:
        """The caching allocator behind ``alloc`` for ``kind`` memory (statistics, trim, limits)."""
        return self.default_context.memory_pool(self, kind)

    def create_queue(self, profiling: bool = False, context: Context | None = None) -> Queue:
        """A new in-order queue; with ``profiling``, its events carry timestamps."""
        return Queue(context or self.default_context, self, profiling)

    def load_program(self, image: bytes | bytearray | memoryview, context: Context | None = None) -> Program:
        """Load a device image (the backend's format; ``build_program`` builds one from source)."""
        return Program(context or self.default_context, self, image)

    def build_program(
        self,
        source: str,
        options: Sequence[str] = (),
        context: Context | None = None,
        cache: bool = True,
        compiler: str | None = None,
    ) -> Program:
        """Build ``source`` in the backend's source language (OpenCL C, C on the host backend, ...)
        with ``compiler`` (a name on ``PATH`` or a path; ``None``: the backend's default) and load
        it; while that program is loaded, the same build in the same context returns it again.
        Built images are cached on disk (``PYOFFLOAD_CACHE_DIR``); a compiler error is a
        ``CompileError`` whose ``build_log`` holds the compiler's messages."""
        return build_program(self, context or self.default_context, source, options, cache, compiler)  # type: ignore[no-any-return]

    def lock(self, buffer: Any, read_only: bool = False) -> int:
        """Pin a host buffer for this device; return the device-accessible address of its start."""
        return lock(self, buffer, read_only)

    def unlock(self, buffer: Any) -> None:
        """Drop one ``lock`` of ``buffer``; the memory is unpinned when its last lock is dropped."""
        unlock(self, buffer)


# ------------------------------------------------------------------------------------------
# starting the runtime
# ------------------------------------------------------------------------------------------


def runtime() -> Runtime:
    """The live runtime, starting one on first use."""
    rt = _runtime.active()
    if rt is not None and rt.alive:
        return rt
    with _runtime.lock():
        rt = _runtime.active()
        if rt is None:
            rt = _start()
            _runtime.install(rt)
        elif not rt.alive:
            rt.check_alive()
        return rt


def _start() -> Runtime:
    settings = Settings.from_environment()
    backends, reports = load_backends(settings.plugins, lambda name: _runtime.wrappers_for(name, settings.trace))
    rt = Runtime(settings, backends, reports)
    for backend in list(backends):
        if not _init_backend(rt, backend, settings):
            backends.remove(backend)
    return rt


def _init_backend(rt: Runtime, backend: Backend, settings: Settings) -> bool:
    report = backend.report
    try:
        descs: Iterable[PlatformDesc] = backend.dispatch.init_impl() or ()
    except NoDevicesError as exc:
        report.status, report.reason = "no devices", str(exc.args[0])
        return False
    except BaseException as exc:
        report.status, report.reason = "failed", f"init_impl raised {exc!r}"
        return False
    selector = settings.devices
    wanted = None if selector is None or backend.name == HOST_BACKEND else selector.get(backend.name, frozenset())
    index = 0
    for pdesc in descs:
        platform = Platform(rt, backend, pdesc)
        for ddesc in pdesc.devices:
            if wanted is None or index in wanted:
                platform.devices.append(Device(platform, ddesc, index))
            index += 1
        if platform.devices:
            rt.platforms.append(platform)
            rt.devices.extend(platform.devices)
    report.devices = sum(len(p.devices) for p in rt.platforms if p.plugin is backend)
    if not report.devices:
        report.status = "no devices"
        report.reason = "PYOFFLOAD_DEVICES selects none" if index else "the backend reported none"
    return True


def platforms() -> list[Platform]:
    """Every platform of every working backend; the host platform last."""
    return list(runtime().platforms)


def devices() -> list[Device]:
    """Every device of every working backend; the host device last."""
    return list(runtime().devices)


def host_device() -> Device:
    """The built-in host backend's device."""
    for d in runtime().devices:
        if d.type is DeviceType.HOST:
            return d  # type: ignore[no-any-return]
    raise NotFoundError("the host backend is not available")


def plugins() -> list[PluginReport]:
    """What happened to each installed plugin: ok, no devices, failed, incompatible, conflict,
    disabled — with the reason."""
    return list(runtime().reports)
