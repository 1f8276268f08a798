"""One backend's ``*_impl`` hooks as plain positional callables: dispatched once, then called directly.

A pluggy hook call costs ~2 µs, which is most of a kernel launch on a fast binding.  When no
wrapper plugin (tracing, fault injection) is registered, every ``*_impl`` hook of a backend has
exactly one implementation (plus, for optional hooks, the generic default), so the dispatcher
binds the implementation functions directly.  Registering or removing a wrapper rebuilds the
bindings, and from then on every call goes through pluggy so that the wrapper sees it.

An exception that is not an :class:`~pyoffload.OffloadError` is wrapped in ``BackendError``
naming the backend and the hook, so callers only ever see pyoffload's error classes.  The hot
paths (a queue's enqueue and synchronisation) call the unwrapped functions in ``Dispatcher.raw``
and word a failure with :meth:`Dispatcher.failure` themselves, which saves a Python frame per call.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pluggy

from ..errors import BackendError, OffloadError, UnsupportedError


def failure(backend: str, name: str, exc: Exception) -> BackendError:
    """The error a caller raises (``from exc``) when backend ``backend``'s hook ``name`` raised
    ``exc``, something other than an :class:`~pyoffload.OffloadError`."""
    return BackendError(f"backend {backend!r} failed in {name}: {exc!r}")


def _wrap_errors(backend: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except OffloadError:
            raise
        except Exception as exc:
            raise failure(backend, name, exc) from exc

    call.__name__ = name
    return call


def _positional(fn: Callable[..., Any], impl_args: tuple[str, ...], spec_args: tuple[str, ...]) -> Callable[..., Any]:
    """``fn`` called with the spec's positional arguments (an implementation may leave some out)."""
    if impl_args == spec_args:
        return fn
    idx = tuple(spec_args.index(a) for a in impl_args)
    return lambda *a: fn(*[a[i] for i in idx])


def _direct(hook: pluggy.HookCaller) -> Callable[..., Any] | None:
    """A positional callable for ``hook`` that bypasses pluggy, or ``None`` if wrappers are present."""
    impls = hook.get_hookimpls()
    if any(i.wrapper or i.hookwrapper for i in impls):
        return None
    spec_args = tuple(hook.spec.argnames) if hook.spec else ()
    # pluggy calls the last registered (and tryfirst) implementations first.
    bound = [_positional(i.function, tuple(i.argnames), spec_args) for i in reversed(impls)]
    if not bound:
        return _missing(hook.name)
    if len(bound) == 1:
        return bound[0]

    def first_result(*a: Any) -> Any:
        for fn in bound:
            res = fn(*a)
            if res is not None:
                return res
        return None

    return first_result


def _missing(name: str) -> Callable[..., Any]:
    def call(*a: Any) -> Any:
        raise UnsupportedError(f"the backend does not implement {name}")

    return call


def _through_pluggy(hook: pluggy.HookCaller) -> Callable[..., Any]:
    names = tuple(hook.spec.argnames) if hook.spec else ()

    def call(*a: Any) -> Any:
        return hook(**dict(zip(names, a, strict=False)))

    return call


class Dispatcher:
    """Attribute access gives a positional callable per ``*_impl`` hook of one backend.

    ``direct`` is True while no wrapper plugin is registered: the hot paths that bypass hooks
    altogether (a prepared launch's bound function) check it.  ``raw`` holds the same callables
    without the error wrapping, for callers that catch and word failures themselves.
    """

    def __init__(self, backend: str, pm: pluggy.PluginManager) -> None:
        self.backend = backend
        self.pm = pm
        self.direct = True
        self.raw = types.SimpleNamespace()
        self.rebuild()

    def failure(self, name: str, exc: Exception) -> BackendError:
        """The ``BackendError`` for ``exc``, raised by this backend's hook ``name``."""
        return failure(self.backend, name, exc)

    def rebuild(self) -> None:
        direct = True
        for name in dir(self.pm.hook):
            if not name.endswith("_impl"):
                continue
            hook = getattr(self.pm.hook, name)
            if not isinstance(hook, pluggy.HookCaller) or hook.spec is None:
                continue
            fn = _direct(hook)
            if fn is None:
                direct = False
                fn = _through_pluggy(hook)
            setattr(self.raw, name, fn)
            setattr(self, name, _wrap_errors(self.backend, name, fn))
        self.direct = direct

    def implements(self, name: str) -> bool:
        """Whether the backend itself (not only the generic default) implements hook ``name``."""
        hook = getattr(self.pm.hook, name)
        return any(i.plugin_name == self.backend for i in hook.get_hookimpls())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Only reached for names rebuild() did not bind: every hook is set as an attribute there.
        raise AttributeError(f"{name!r} is not a hook of backend {self.backend!r}")
