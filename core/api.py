"""The public objects that tie the layers together, and starting the runtime.

:class:`Device` and :class:`Context` are the generic device and context with the factories of the
layers above them (memory, programs, queues, pinning).  :func:`runtime` starts the runtime on
first use: settings, plugin discovery, each backend's ``init_impl``, the device selector, then the
platform and device objects, host device last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import runtime as _runtime
from .build import build_program
from .context import GenericContext
from .device import GenericDevice, Platform
from .enums import AllocKind, DeviceType
from .errors import NoDevicesError, NotFoundError
from .hooks.discovery import HOST_BACKEND, Backend, PluginReport, load_backends
from .memory import AllocSite, Allocation, allocate, device_alloc, site_of
from .memory_pool import MemoryPool, bytes_or_none, check_pool, where
from .pinning import lock, unlock
from .program import Program
from .queue import Queue
from .runtime import Runtime
from .settings import Settings

if TYPE_CHECKING:
    from .backend import PlatformDesc


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
        pool: MemoryPool | None = None,
    ) -> Allocation:
        """Allocate ``size`` bytes of ``kind``; ``device`` defaults to the context's first device
        (HOST memory has none).  ``alignment`` (a power of two) makes the address a multiple of it.
        ``pool``: from that pool of this context (made by ``create_pool``), which must serve
        ``kind`` memory of ``device``."""
        if pool is not None:
            return check_pool(pool).alloc_for(self, device, kind, size, alignment, None)
        return allocate(self, device, size, kind, None, alignment)

    def memory_pool(self, device: GenericDevice | None = None, kind: AllocKind = AllocKind.DEVICE) -> MemoryPool:
        """The pool of ``kind`` memory on ``device`` (the first device by default; none for HOST)."""
        if kind is AllocKind.HOST:
            device = None
        else:
            device = device or self.devices[0]
            self.check_device(device, "memory_pool")
        return MemoryPool(self.pool(device, kind), where(self, device, kind), self, device, kind)

    def create_pool(
        self,
        device: GenericDevice | None = None,
        kind: AllocKind = AllocKind.DEVICE,
        *,
        limit: int | None = None,
        release_threshold: int | None = None,
        initial_reserve: int = 0,
        max_request: int | None = None,
    ) -> MemoryPool:
        """A new pool of ``kind`` memory on ``device`` (the context's first device by default; none
        for HOST memory), with a cache, limit and statistics of its own: ``limit`` caps the bytes
        it reserves from the backend, ``release_threshold`` the bytes it keeps cached after a free,
        ``initial_reserve`` bytes are reserved (and cached) at once, ``max_request`` bounds the
        request sizes it serves (larger ones go straight to the backend; ``None``: every size).
        The context's ``close`` releases it with everything else; ``destroy()`` ends it sooner."""
        limit = bytes_or_none(limit, "limit")
        release_threshold = bytes_or_none(release_threshold, "release_threshold")
        reserve = bytes_or_none(initial_reserve, "initial_reserve") or 0
        max_request = bytes_or_none(max_request, "max_request")
        base = site_of(self, device, kind)  # checks the device and the kind, as alloc does
        device = base.device
        allocator = self._make_pool(device, kind)
        allocator.limit, allocator.max_request = limit, max_request
        site = AllocSite(self, device, kind, allocator)
        pool = MemoryPool(allocator, where(self, device, kind, created=True), self, device, kind, site)
        self.add_user_pool(allocator, site)
        try:
            if reserve:
                allocator.reserve(reserve)
        except BaseException:
            pool.destroy()
            raise
        allocator.release_threshold = release_threshold  # after the reserve, which it would trim
        return pool

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

    def alloc(
        self,
        size: int,
        kind: AllocKind = AllocKind.DEVICE,
        alignment: int | None = None,
        pool: MemoryPool | None = None,
    ) -> Allocation:
        """Allocate in the default context; HOST memory belongs to no device.  ``alignment`` (a
        power of two) makes the address a multiple of it.  ``pool``: from that pool (made by
        ``create_pool`` in the default context), which must serve ``kind`` memory of this device."""
        if pool is not None:
            return check_pool(pool).alloc_for(self.default_context, self, kind, size, alignment, None)
        return device_alloc(self, size, kind, alignment)

    def create_pool(
        self,
        kind: AllocKind = AllocKind.DEVICE,
        *,
        limit: int | None = None,
        release_threshold: int | None = None,
        initial_reserve: int = 0,
        max_request: int | None = None,
    ) -> MemoryPool:
        """A new pool of ``kind`` memory of this device in its default context (HOST memory: of
        the platform): see ``Context.create_pool``."""
        return self.default_context.create_pool(
            self,
            kind,
            limit=limit,
            release_threshold=release_threshold,
            initial_reserve=initial_reserve,
            max_request=max_request,
        )

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
        source: str | Sequence[str],
        options: Sequence[str] = (),
        context: Context | None = None,
        cache: bool = True,
        compiler: str | None = None,
    ) -> Program:
        """Build ``source`` in the backend's source language (OpenCL C, C on the host backend, ...)
        with ``compiler`` (a name on ``PATH`` or a path; ``None``: the backend's default) and load
        it; while that program is loaded, the same build in the same context returns it again.
        Built images are cached on disk (``PYOFFLOAD_CACHE_DIR``); a compiler error is a
        ``CompileError`` whose ``build_log`` holds the compiler's messages.  A list of sources is
        compiled source by source and linked into one program (a function one source declares
        and another defines); a symbol no source defines is a ``CompileError`` with errc
        ``LINK_FAILURE`` naming it, and a backend that cannot link is ``UNSUPPORTED``."""
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
