"""The allocator's locks, and the one place that handles a finalizer re-entering the allocator.

Every structure of the allocator (the address registry, each caching allocator, the pinned
maps) is guarded by a lock made by :func:`allocator_lock`, named next to the fields it guards.
It is a ``threading.RLock`` used as a plain lock: its C ``with`` protocol cannot be interrupted
between taking the lock and arming its release (a ``KeyboardInterrupt`` anywhere in a ``with``
block releases it), and it can tell whether the calling thread holds it (:func:`held_by_me`).

That second property is needed for one reason: a garbage collection can run a finalizer
(``__del__``, ``weakref.finalize``) at any allocation of a Python object, so also on a thread that
is inside the allocator.  A finalizer that frees memory must then neither wait for a lock its own
thread holds (for ever) nor re-enter a structure in the middle of an update.  CuPy meets this with
``LockAndNoGc`` (the collector is off while the pool's lock is held); switching the collector off
is process-wide, so here the free is *deferred* instead:

* :func:`pyoffload.free` first asks :func:`held_by_me` of the locks it needs; if this thread holds
  one, it hands the free to :func:`defer` and returns.
* :func:`run_deferred` runs them: every allocation and free calls it on its way out, when its
  thread holds no allocator lock any more.  A deferred free whose thread still holds a lock it
  needs defers itself again.  An error of a deferred free is reported like an exception in a
  finalizer (``sys.unraisablehook``): the finalizer returned long ago.
* Allocating from such a finalizer cannot be deferred (it has to return the memory): it raises
  ``RuntimeError`` instead of re-entering the pool.

Re-entrancy of the ``RLock`` itself is never used: every entry point checks first.  Nothing here
relies on the GIL (the lock and its owner are the C implementation's, the queue of deferred frees
is a ``collections.deque``, whose appends and pops are atomic).
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["AllocatorLock", "allocator_lock", "check_not_reentered", "defer", "held_by_me", "run_deferred"]


class AllocatorLock(Protocol):
    """What the allocator uses of a lock: ``with``, ``acquire``/``release``, and the owner test."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...
    def _is_owned(self) -> bool: ...


allocator_lock: Callable[[], AllocatorLock] = threading.RLock  # type: ignore[assignment]
"""A new lock for one of the allocator's structures."""

_deferred: collections.deque[Callable[[], None]] = collections.deque()  # atomic appends and pops


def held_by_me(lock: AllocatorLock) -> bool:
    """Whether the calling thread holds ``lock``."""
    return lock._is_owned()


def check_not_reentered(lock: AllocatorLock, what: str) -> None:
    """Raise instead of re-entering a structure whose update this thread is in the middle of."""
    if lock._is_owned():
        raise RuntimeError(
            f"{what}: pyoffload's allocator was re-entered on the thread that is inside it "
            "(a finalizer that a garbage collection ran during an allocation or free); "
            "free from finalizers, but do not allocate there"
        )


def defer(action: Callable[[], None]) -> None:
    """Run ``action`` once the thread that runs :func:`run_deferred` holds no allocator lock."""
    _deferred.append(action)


def pending() -> int:
    """Deferred actions not run yet."""
    return len(_deferred)


def run_deferred() -> None:
    """Run what is deferred (at most what is there now: an action that defers itself again
    waits for the next call).  Cheap when nothing is."""
    for _ in range(len(_deferred)):
        try:
            action = _deferred.popleft()
        except IndexError:  # another thread ran it
            return
        try:
            action()
        except Exception as exc:
            _report(exc, action)


def _report(exc: BaseException, action: Any) -> None:
    """Hand ``exc`` to ``sys.unraisablehook``, as the interpreter does for a finalizer's."""
    sys.unraisablehook(
        _unraisable_args()(
            (type(exc), exc, exc.__traceback__, "Exception ignored in a deferred pyoffload free", action)
        )
    )


def _unraisable_args() -> Any:
    """``sys.UnraisableHookArgs``: the hook accepts only that type, which ``sys`` does not name."""
    global _ARGS_TYPE
    if _ARGS_TYPE is None:
        seen: list[Any] = []
        hook, sys.unraisablehook = sys.unraisablehook, seen.append
        try:
            _Raises()
        finally:
            sys.unraisablehook = hook
        _ARGS_TYPE = type(seen[0])
    return _ARGS_TYPE


_ARGS_TYPE: Any = None


class _Raises:
    def __del__(self) -> None:
        raise RuntimeError("probe")
