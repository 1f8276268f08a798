"""The process-wide runtime: lazy initialisation, the object lists, teardown and atexit.

Nothing happens at import: backends are discovered and initialised the first time the
application asks for platforms or devices (LLVM issue #159636: plugin initialisation should not be
a cost every process pays).  ``shutdown()`` and the atexit handler tear everything down in one
order: programs (destructors) in reverse load order, queues, allocations and pools, pinned ranges,
contexts, then each backend's ``deinit_impl``.  Failures there become warnings.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .discovery import HOST_BACKEND, Backend, PluginReport, load_backends
from .errors import Errc, InvalidHandleError, NoDevicesError, OffloadError, TeardownWarning
from .intervals import IntervalMap
from .pool import threshold_from_env
from .tracking import Tracker

if TYPE_CHECKING:
    from .context import Context
    from .device import Device, Platform
    from .memory import Allocation
    from .program import Program
    from .queue import Queue

WrapperFactory = Callable[[str], Any]


class Runtime:
    """All live state.  One instance per initialisation; a shutdown retires it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.alive = True
        self.backends: list[Backend] = []
        self.reports: list[PluginReport] = []
        self.platforms: list[Platform] = []
        self.devices: list[Device] = []
        self.contexts: list[Context] = []
        self.programs: dict[int, Program] = {}  # insertion order is load order
        self.queues: dict[int, Queue] = {}
        self._next_program = 0
        self.registry: IntervalMap[Allocation] = IntervalMap()
        self.live_per_backend: dict[str, int] = {}
        # Bumped by anything that can invalidate a checked-once fast path (see PreparedLaunch).
        self.epoch = 0
        self.tracker = Tracker()
        self.pool_threshold = threshold_from_env()

    def add_program(self, program: Program) -> int:
        with self.lock:
            self._next_program += 1
            self.programs[self._next_program] = program
            return self._next_program

    def check_alive(self) -> None:
        if not self.alive:
            raise InvalidHandleError(
                "this object belongs to a pyoffload runtime that was shut down", Errc.UNINITIALIZED
            )


_lock = threading.RLock()
_current: Runtime | None = None
_wrapper_factories: list[WrapperFactory] = []
_atexit_registered = False


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _wrappers_for(backend: str) -> list[Any]:
    wrappers = [factory(backend) for factory in _wrapper_factories]
    if _env_flag("PYOFFLOAD_TRACE"):
        from .tracing import TracingPlugin

        wrappers.append(TracingPlugin(backend))
    return wrappers


def _device_selector() -> dict[str, set[int] | None] | None:
    """``PYOFFLOAD_DEVICES="opencl:0,1;cuda:*"`` -> {"opencl": {0, 1}, "cuda": None}."""
    raw = os.environ.get("PYOFFLOAD_DEVICES")
    if raw is None or not raw.strip():
        return None
    selected: dict[str, set[int] | None] = {}
    for term in raw.split(";"):
        term = term.strip()
        if not term:
            continue
        backend, _, ids = term.partition(":")
        ids = ids.strip() or "*"
        if ids == "*":
            selected[backend.strip()] = None
        else:
            try:
                selected[backend.strip()] = {int(i) for i in ids.split(",")}
            except ValueError:
                raise OffloadError(
                    f"PYOFFLOAD_DEVICES term {term!r}: device ids must be integers or '*'",
                    Errc.INVALID_VALUE,
                ) from None
    return selected


def _initialise() -> Runtime:
    from .device import Device, Platform

    rt = Runtime()
    rt.backends, rt.reports = load_backends(_wrappers_for)
    selector = _device_selector()
    for backend in list(rt.backends):
        report = backend.report
        try:
            descs = backend.dispatch.init_impl()
        except NoDevicesError as exc:
            report.status, report.reason = "no devices", str(exc.args[0])
            rt.backends.remove(backend)
            continue
        except BaseException as exc:
            report.status, report.reason = "failed", f"init_impl raised {exc!r}"
            rt.backends.remove(backend)
            continue
        index = 0
        wanted = None if selector is None or backend.name == HOST_BACKEND else selector.get(backend.name, set())
        for pdesc in descs or ():
            platform = Platform(rt, backend, pdesc)
            for ddesc in pdesc.devices:
                if wanted is None or index in wanted:
                    platform.devices.append(Device(platform, ddesc, index))
                index += 1
            if platform.devices:
                rt.platforms.append(platform)
                rt.devices.extend(platform.devices)
        report.devices = sum(len(p.devices) for p in rt.platforms if p._backend is backend)
        if not report.devices:
            report.status = "no devices"
            report.reason = "PYOFFLOAD_DEVICES selects none" if index else "the backend reported none"
    return rt


def current() -> Runtime:
    """The live runtime, initialising it on first use."""
    global _current, _atexit_registered
    rt = _current
    if rt is not None:
        return rt
    with _lock:
        if _current is None:
            _current = _initialise()
            if not _atexit_registered:
                atexit.register(_atexit_teardown)
                _atexit_registered = True
        return _current


def is_initialised() -> bool:
    return _current is not None


def add_wrapper(factory: WrapperFactory) -> None:
    """Register a wrapper plugin factory (``factory(backend_name) -> plugin``) in every backend,
    present and future.  Used by tracing and by the test suite's fault injection."""
    with _lock:
        _wrapper_factories.append(factory)
        if _current is not None:
            for backend in _current.backends:
                backend.pm.register(factory(backend.name), name=f"wrapper-{id(factory)}")
                backend.dispatch.rebuild()
            _current.epoch += 1


def remove_wrapper(factory: WrapperFactory) -> None:
    with _lock:
        _wrapper_factories.remove(factory)
        if _current is not None:
            for backend in _current.backends:
                backend.pm.unregister(name=f"wrapper-{id(factory)}")
                backend.dispatch.rebuild()
            _current.epoch += 1


def _warn(what: str, exc: BaseException) -> None:
    warnings.warn(f"pyoffload teardown: {what} failed: {exc!r}", TeardownWarning, stacklevel=3)


def teardown(rt: Runtime, at_exit: bool = False) -> None:
    """Release everything ``rt`` holds, in dependency order; never raises."""
    from . import memory, pinning, tracking

    with rt.lock:
        if not rt.alive:
            return
        rt.epoch += 1
        for program in reversed(list(rt.programs.values())):
            try:
                program._release(teardown=True)
            except BaseException as exc:
                _warn(f"unloading {program!r}", exc)
        for queue in list(rt.queues.values()):
            try:
                queue._release(teardown=True)
            except BaseException as exc:
                _warn(f"destroying {queue!r}", exc)
        tracking.report_at_deinit(rt)
        memory.release_all(rt, _warn, at_exit)
        pinning.release_all(rt, _warn)
        for ctx in reversed(rt.contexts):
            try:
                ctx._release_handle()
            except BaseException as exc:
                _warn(f"destroying {ctx!r}", exc)
        for backend in rt.backends:
            try:
                backend.dispatch.deinit_impl()
            except BaseException as exc:
                _warn(f"deinit of backend {backend.name!r}", exc)
        rt.alive = False
        rt.epoch += 1


def shutdown() -> None:
    """Tear the runtime down now: destructors run, memory is freed, backends are deinitialised.

    Objects from before the shutdown are invalid afterwards.  The next call that needs devices
    initialises a fresh runtime.  Calling ``shutdown`` when the runtime is not initialised (for
    example twice in a row) is an ``UNINITIALIZED`` error, as ``olShutDown`` in liboffload.
    """
    global _current
    with _lock:
        rt = _current
        if rt is None:
            raise OffloadError(
                "shutdown() called but pyoffload is not initialised (already shut down?)",
                Errc.UNINITIALIZED,
            )
        _current = None
    teardown(rt)


def _atexit_teardown() -> None:
    global _current
    rt, _current = _current, None
    if rt is None:
        return
    try:
        teardown(rt, at_exit=True)
    except BaseException as exc:  # never let atexit raise
        _warn("interpreter-exit teardown", exc)
