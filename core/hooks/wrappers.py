"""Build pluggy wrapper plugins that see every ``*_impl`` hook call.

Cross-cutting layers (tracing, fault injection, validation) are classes with one generator method,
``around(self, hook, kwargs)``, in pluggy's new-style wrapper protocol: code before ``yield`` runs
before the backend's implementation, ``yield`` returns its result (or raises its exception), and
the method returns the result to pass on.  :func:`wrap_every_hook` turns such a class into a pluggy
plugin with one ``wrapper=True`` implementation per hook specification.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .. import hookspecs
from ..backend import hookimpl

T = TypeVar("T", bound=type)


def spec_argnames(name: str) -> tuple[str, ...]:
    code = hookspecs.specs()[name].__code__
    return code.co_varnames[: code.co_argcount]


def impl_hook_names() -> list[str]:
    return sorted(n for n in hookspecs.specs() if n.endswith("_impl"))


def _wrapper_for(name: str) -> Any:
    argnames = spec_argnames(name)
    # pluggy matches implementations to specs by parameter names, so the wrapper must carry the
    # spec's own parameter list; generating it is the only way to get a real signature.
    params = "".join(f", {a}" for a in argnames)
    call = ", ".join(f"{a!r}: {a}" for a in argnames)
    src = f"def {name}(self{params}):\n    return (yield from self.around({name!r}, {{{call}}}))\n"
    namespace: dict[str, Any] = {}
    exec(src, namespace)  # noqa: S102
    return hookimpl(wrapper=True)(namespace[name])


def wrap_every_hook(cls: T) -> T:
    """Class decorator adding a ``wrapper=True`` implementation of every ``*_impl`` hook."""
    for name in impl_hook_names():
        if name not in cls.__dict__:
            setattr(cls, name, _wrapper_for(name))
    return cls
