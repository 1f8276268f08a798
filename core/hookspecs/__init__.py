"""Hook contract v1: every vendor call a backend provides, and the observer hooks.

This package is the contract between pyoffload's generic layer and a backend, split by concept:
:mod:`.lifecycle` (init, devices, contexts), :mod:`.memory`, :mod:`.programs`, :mod:`.queues`
(queues, launches, events), :mod:`.testing` (the conformance suite) and :mod:`.observers`.  A
backend implements the ``*_impl`` hooks as functions marked with
:data:`pyoffload.backend.hookimpl` and declares ``HOOK_API`` (:data:`pyoffload.backend.HOOK_API`).

The rules every ``*_impl`` hook follows (each hook's docstring adds its own):

* **One backend per call.**  Every backend has its own :class:`pluggy.PluginManager`; a call
  reaches only the backend that owns the device.  Cross-cutting plugins (tracing, fault
  injection) are ``wrapper=True`` hooks registered in every manager.
* **Handles.**  ``device``, ``context``, ``program``, ``kernel``, ``queue`` and ``event`` are the
  backend's own objects, exactly as it returned them from ``init_impl``,
  ``context_create_impl``, ``load_binary_impl``, ``get_kernel_impl``, ``queue_create_impl`` and
  ``event_record_impl``.  Pointers are ``int`` addresses; sizes are ``int`` byte counts.
* **Checked beforehand.**  The generic layer has checked everything it owns before a hook is
  called: sizes are positive and below 2**64, pointers lie in live allocations (or pinned or
  foreign memory) with the whole range in bounds, kinds are valid for the device, launch
  dimensions are within the device's limits, arguments match the kernel's signature.  A backend
  never re-validates what the generic layer checked.
* **One path per operation.**  Every transfer, fill and launch reaches the backend on a queue:
  the synchronous form of an operation is the queued form on the context's internal queue,
  followed by a wait.  No hook receives ``queue=None``.
* **Enqueue hooks do not block** (``data_submit_impl``, ``data_retrieve_impl``,
  ``data_exchange_impl``, ``data_fill_impl``, ``data_prefetch_impl``, ``launch_impl``, a
  prepared launch, ``enqueue_host_function_impl``, ``queue_wait_events_impl``,
  ``event_record_impl``): they hand the work to the driver and return.  The generic layer calls
  them with the queue's lock held, which serialises enqueues on one queue and keeps its ledger in
  the driver's order; blocking there would stall every thread using the queue.  Waiting hooks
  (``queue_synchronize_impl``, ``event_wait_impl``) and ``data_free_impl`` may block; the generic
  layer never holds a lock of its own while calling them.
* **Events exist only when needed.**  Enqueue hooks return nothing.  When the generic layer needs
  to observe completion (the user waits on one operation, a host buffer must be released, a
  profiling queue), it records an event with ``event_record_impl`` and releases it with
  ``event_release_impl`` once it no longer needs it.
* **When failures are reported.**  An enqueue hook raises only what it can tell at enqueue time
  (arguments the driver refuses, exhausted resources).  A failure of the work itself (a kernel
  that faults, a copy that fails) is raised by ``event_wait_impl`` / ``event_query_impl`` of any
  event recorded after it and by ``queue_synchronize_impl`` — until one of those waits has raised
  it: events the queue reaches after that do not carry it any more, so the queue keeps working
  (unless the device itself is left unusable, as by a CUDA kernel fault: then say so in every
  later call).  The generic layer reports it to the user once per queue and on every wait of the
  operation's own event.
* **Errors.**  Raise the classes of :mod:`pyoffload.backend`: ``OutOfResourcesError`` (the
  caching allocator then releases its cache and retries once), ``InvalidBinaryError``,
  ``CompileError`` (with ``build_log``), ``NotFoundError``, ``UnsupportedError``,
  ``NoDevicesError`` (``init_impl`` only).  Anything else is wrapped in ``BackendError`` naming
  the backend and the hook.  A hook that raises must have created nothing.
* **Threads.**  Hooks may be called from any thread, concurrently, also for the same device;
  a backend protects its own shared state.  The host functions a backend runs
  (``enqueue_host_function_impl``) may call back into any hook.

Hooks whose docstring starts with *Optional.* have a generic default (:mod:`pyoffload.defaults`);
a backend implements them only when it can do better.  Observer hooks (no ``_impl`` suffix) are
called on every registered plugin, not just the device's backend.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pluggy

from ..backend import PROJECT
from . import lifecycle, memory, observers, programs, queues, testing
from .marker import hookspec

MODULES: tuple[ModuleType, ...] = (lifecycle, memory, programs, queues, testing, observers)


def add_to(pm: pluggy.PluginManager) -> None:
    """Register every hook specification with ``pm``."""
    for module in MODULES:
        pm.add_hookspecs(module)


def specs() -> dict[str, Callable[..., Any]]:
    """Every hook specification by name, in the order of the contract."""
    found: dict[str, Callable[..., Any]] = {}
    for module in MODULES:
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if hasattr(fn, f"{PROJECT}_spec"):
                found[name] = fn
    return found


def is_optional(fn: Callable[..., Any]) -> bool:
    return (inspect.getdoc(fn) or "").startswith("*Optional.*")


__all__ = ["MODULES", "add_to", "hookspec", "is_optional", "specs"]
