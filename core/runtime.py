"""The process-wide runtime state: what is alive, teardown in dependency order, exit and fork.

Nothing happens at import: the public layer (:mod:`pyoffload.api`) discovers and initialises the
backends the first time the application asks for devices and installs the result here (LLVM
issue #159636: plugin initialisation should not be a cost every process pays).  The layers below
the public one only ever look at the runtime that exists (:func:`active`); none of them starts one.

Teardown (``pyoffload.shutdown()`` and interpreter exit) runs in one order: the application's
``on_shutdown`` callbacks (the runtime still fully usable), then programs (destructors) in reverse
load order, queues, the allocation report, allocations and caches, pinned ranges, contexts, and
each backend's ``deinit_impl``.  At interpreter exit it stops after the report: daemon threads may
still be using memory and drivers, and the process's end reclaims them.  Objects take part
through one small protocol, ``teardown(at_exit)``, so this module imports none of them.  No lock
is held while an object waits for its device or a callback runs; failures become
:class:`~pyoffload.TeardownWarning`.

After ``fork()`` the child inherits a runtime whose drivers, threads and locks belong to the
parent: every use in the child is an error that says so (the parent's objects are never touched,
and nothing of it is torn down at the child's exit).
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from .addresses.intervals import RangeMap
from .errors import Errc, InvalidHandleError, OffloadError, TeardownWarning, got
from .hooks.discovery import Backend, PluginReport
from . import settings as _settings
from .settings import Settings
from .tracking import Tracker

WrapperFactory = Callable[[str], Any]

LIVE, CLOSING, CLOSED, FORKED = "live", "closing", "closed", "forked"

FORK_MESSAGE = (
    "pyoffload was initialised in the parent process before fork(): the child cannot use the "
    "parent's devices, queues or memory.  Start pyoffload only in the child, use the 'spawn' or "
    "'forkserver' start method, or call pyoffload.shutdown() in the child to discard the inherited "
    "runtime and start a fresh one"
)


class Releasable(Protocol):
    """What teardown needs of programs, queues, allocations, devices and contexts."""

    def teardown(self, at_exit: bool) -> None: ...


class Abandonable(Releasable, Protocol):
    """Queues and contexts, which a forked child makes unusable without a driver call."""

    def abandon(self) -> None: ...


_Tracked = TypeVar("_Tracked", bound=Releasable)


class Runtime:
    """All live state of one initialisation; a shutdown retires it.

    ``lock`` guards the object tables only: it is never held while waiting on a device, running
    user code, or calling a hook that may block.
    """

    def __init__(self, settings: Settings, backends: list[Backend], reports: list[PluginReport]) -> None:
        self.settings = settings
        self.lock = threading.RLock()
        self.state = LIVE
        self.backends = backends
        self.reports = reports
        self.platforms: list[Any] = []  # pyoffload.Platform, filled in by the public layer
        self.devices: list[Any] = []  # pyoffload.Device, host device last
        self.contexts: list[Abandonable] = []
        self.programs: dict[int, Releasable] = {}  # insertion order is load order
        self.queues: dict[int, Abandonable] = {}
        self.registry: RangeMap = RangeMap()  # every allocation (and global, foreign range)
        # Owned live allocations per backend (pyoffload.memory.LiveCounts, made by the first
        # allocation site; guarded by registry.lock).
        self.live_counts: Any = None
        self.tracker = Tracker(settings.track_allocations)
        # Bumped by anything that can invalidate a checked-once fast path (see PreparedLaunch).
        self.epoch = 0
        self.pid = os.getpid()

    @property
    def alive(self) -> bool:
        return self.state is LIVE

    def check_alive(self) -> None:
        if self.state is not LIVE:
            raise dead_runtime_error(self)

    def track(self, table: dict[int, _Tracked], obj: _Tracked) -> None:
        with self.lock:
            self.check_alive()
            table[id(obj)] = obj

    def untrack(self, table: dict[int, _Tracked], obj: _Tracked) -> None:
        with self.lock:
            table.pop(id(obj), None)
            self.epoch += 1


def dead_runtime_error(rt: Runtime | None) -> OffloadError:
    if rt is not None and rt.state is FORKED:
        return OffloadError(FORK_MESSAGE, Errc.UNINITIALIZED)
    return InvalidHandleError("this object belongs to a pyoffload runtime that was shut down", Errc.UNINITIALIZED)


_lock = threading.RLock()
_current: Runtime | None = None
CURRENT: Runtime | None = None
"""The runtime if one is initialised, else ``None`` (what :func:`active` returns, as a module
attribute for the hot paths that read it without a call)."""
_wrapper_factories: list[WrapperFactory] = []
_shut_down = False


def active() -> Runtime | None:
    """The runtime if one is initialised (whatever its state), else ``None``."""
    return _current


def install(rt: Runtime | None) -> None:
    """Make ``rt`` the process's runtime (the public layer calls this once it is built)."""
    global _current, CURRENT, _shut_down
    _current = CURRENT = rt
    _shut_down = rt is None and _shut_down


def was_shut_down() -> bool:
    """Whether ``shutdown()`` ended the last runtime and none has started since (calls that need
    one then answer ``UNINITIALIZED``, as liboffload does after ``olShutDown``)."""
    return _shut_down


def lock() -> threading.RLock:
    """The process-wide lock that serialises starting and stopping runtimes."""
    return _lock


def wrappers_for(backend: str, trace: bool) -> list[Any]:
    """The wrapper plugins for a backend's manager: registered factories, plus tracing."""
    wrappers = [factory(backend) for factory in _wrapper_factories]
    if trace:
        from .hooks.tracing import TracingPlugin

        wrappers.append(TracingPlugin(backend))
    return wrappers


def add_wrapper(factory: WrapperFactory) -> None:
    """Register a wrapper plugin factory (``factory(backend_name) -> plugin``) in every backend,
    present and future.  Used by the test suite's fault injection."""
    with _lock:
        _wrapper_factories.append(factory)
        rt = _current
        if rt is not None and rt.alive:
            for backend in rt.backends:
                backend.pm.register(factory(backend.name), name=f"wrapper-{id(factory)}")
                backend.dispatch.rebuild()
            rt.epoch += 1


def remove_wrapper(factory: WrapperFactory) -> None:
    with _lock:
        _wrapper_factories.remove(factory)
        rt = _current
        if rt is not None and rt.alive:
            for backend in rt.backends:
                backend.pm.unregister(name=f"wrapper-{id(factory)}")
                backend.dispatch.rebuild()
            rt.epoch += 1


def warn_teardown(what: str, exc: BaseException) -> None:
    warnings.warn(f"pyoffload teardown: {what} failed: {exc!r}", TeardownWarning, stacklevel=3)


def _release_all(items: Sequence[Releasable], what: str, at_exit: bool) -> None:
    for obj in items:
        try:
            obj.teardown(at_exit)
        except Exception as exc:
            warn_teardown(f"releasing {obj!r}", exc)


def teardown(rt: Runtime, at_exit: bool = False) -> None:
    """Release everything ``rt`` holds, in dependency order.  Never raises an ``Exception``; a
    ``KeyboardInterrupt`` during it is raised once the teardown is complete."""
    interrupted: BaseException | None = None
    with _lock:
        callbacks = list(_shutdown_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:
            warn_teardown(f"on_shutdown callback {callback!r}", exc)
        except KeyboardInterrupt as exc:
            interrupted = exc
    with rt.lock:
        if rt.state is not LIVE:
            return
        rt.state = CLOSING
        rt.epoch += 1
        programs = list(reversed(list(rt.programs.values())))
        queues = list(rt.queues.values())
    steps: list[tuple[str, Callable[[], None]]] = [
        ("programs", lambda: _release_all(programs, "program", at_exit)),
        ("queues", lambda: _release_all(queues, "queue", at_exit)),
        ("allocation report", lambda: rt.tracker.report(v for _, _, v in rt.registry.items() if v.owned)),
    ]
    if not at_exit:
        # At interpreter exit, other threads may still be using memory and drivers (daemon threads
        # run until the interpreter stops them): memory, pinned ranges, contexts and the drivers
        # themselves are left to the process's end, which reclaims them, rather than released
        # under those threads.  Destructors (above) are what a program can observe; they have run.
        steps += [
            ("allocations", lambda: _release_all([v for _, _, v in rt.registry.items() if v.owned], "memory", at_exit)),
            ("pinned memory", lambda: _release_all(list(rt.devices), "device", at_exit)),
            ("contexts", lambda: _release_all(list(reversed(rt.contexts)), "context", at_exit)),
        ]
    for what, step in steps:
        try:
            step()
        except KeyboardInterrupt as exc:  # finish the teardown, then report the interrupt
            interrupted = exc
        except Exception as exc:
            warn_teardown(what, exc)
    if not at_exit:
        for backend in rt.backends:
            try:
                backend.dispatch.deinit_impl()
            except Exception as exc:
                warn_teardown(f"deinit of backend {backend.name!r}", exc)
    with rt.registry.lock:
        rt.registry.clear()
        if rt.live_counts is not None:
            rt.live_counts.recount(rt.registry)
    with rt.lock:
        rt.state = CLOSED
        rt.epoch += 1
    if interrupted is not None:
        raise interrupted


def shutdown() -> None:
    """Tear the runtime down now: ``on_shutdown`` callbacks run, destructors run, memory is freed,
    backends are deinitialised.

    Objects from before the shutdown are invalid afterwards; the next call that needs devices
    initialises a fresh runtime.  Calling ``shutdown`` when no runtime is initialised (for example
    twice in a row) is an ``UNINITIALIZED`` error, as ``olShutDown`` in liboffload.  In a child
    process after ``fork()``, it discards the inherited runtime without touching the parent's
    drivers.
    """
    global _shut_down
    with _lock:
        rt = _current
        if rt is None:
            raise OffloadError(
                "shutdown() called but pyoffload is not initialised (already shut down?)", Errc.UNINITIALIZED
            )
        install(None)
        _shut_down = True
    if rt.state is FORKED:
        return
    teardown(rt)


def on_shutdown(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback()`` whenever a runtime shuts down (``shutdown()`` or interpreter exit), before
    anything is released: the place for a framework to drop its cached memory, queues and
    programs (the runtime is still fully usable inside the callback).  Callbacks run in
    registration order; an exception becomes a ``TeardownWarning``.  Returns ``callback``, so it
    works as a decorator.
    """
    if not callable(callback):
        raise TypeError(f"on_shutdown takes a callable, got {got(callback)}")
    with _lock:
        _shutdown_callbacks.append(callback)
    return callback


_shutdown_callbacks: list[Callable[[], None]] = []


EXIT_WAIT_SECONDS = float(_settings.integer("PYOFFLOAD_EXIT_TIMEOUT", 10, minimum=0) or 0)
"""How long interpreter exit waits for outstanding work before leaking it (``PYOFFLOAD_EXIT_TIMEOUT``,
seconds): one budget for the whole exit (see ``exit_wait``)."""

_exit_deadline = math.inf
"""When interpreter exit stops waiting for unfinished work: every wait of the exit teardown
(a program's users, each queue) shares one ``PYOFFLOAD_EXIT_TIMEOUT``, rather than each taking it
in turn (a stuck kernel used to cost it twice: its program, then its queue)."""


def exit_wait(timeout: float) -> float:
    """How long a wait of ``timeout`` seconds may take: at most what is left of the exit budget."""
    return max(0.0, min(timeout, _exit_deadline - time.monotonic()))


def _atexit_teardown() -> None:
    global _exit_deadline
    rt = _current
    install(None)
    if rt is None or rt.state is FORKED or rt.pid != os.getpid():
        return
    _exit_deadline = time.monotonic() + EXIT_WAIT_SECONDS
    try:
        teardown(rt, at_exit=True)
    except BaseException as exc:  # never let atexit raise
        warn_teardown("interpreter-exit teardown", exc)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()
    rt = _current
    if rt is not None:
        rt.state = FORKED
        rt.lock = threading.RLock()
        rt.registry.reset_lock()
        # Queues and contexts become unusable (``_abandon``) without a driver call: the drivers,
        # their threads and locks belong to the parent.
        for obj in [*rt.queues.values(), *rt.contexts]:
            obj.abandon()


atexit.register(_atexit_teardown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
