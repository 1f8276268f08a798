"""Check the plugin's declared pycuda surface (pyoffload_cuda.surface) against a driver module.

Used in-process for the fake driver and in a subprocess for the real ``pycuda.driver`` (which
needs a libcuda to import).  ``python cuda_surface_check.py`` checks the real module and prints JSON.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from typing import Any

from pyoffload_cuda import surface

CLASS_MEMBERS_OF_INTEREST = sorted(
    set(surface.INSTANCE_METHODS) | set(surface.CLASS_FUNCTIONS) | set(surface.CONSTRUCTORS)
)


def _boost_overloads(doc: str, name: str) -> list[list[tuple[str, bool]]]:
    """Parameter lists (name, optional) from a Boost.Python docstring's signature lines."""
    out = []
    for line in doc.splitlines():
        line = line.strip()
        if not line.startswith(name + "(") or ") ->" not in line:
            continue
        inner = line[len(name) + 1 : line.rindex(") ->")]
        params, depth = [], 0
        for m in re.finditer(r"\[|\]|\((\w+)\)(\w+)", inner):
            if m.group(0) == "[":
                depth += 1
            elif m.group(0) != "]":
                params.append((m.group(2), depth > 0))
        out.append(params)
    return out


def _fits(params: list[tuple[str, bool]], n_pos: int, kws: tuple[str, ...]) -> bool:
    required = sum(1 for _, opt in params if not opt)
    names = [p for p, _ in params]
    if n_pos + len(kws) > len(params) or n_pos + len(kws) < required:
        return False
    return all(k in names[n_pos:] for k in kws)


def call_ok(fn: Any, n_pos: int, kws: tuple[str, ...], with_self: bool, name: str) -> str | None:
    """``None`` if ``fn`` accepts the call, else why not."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        args = [object()] * (n_pos + (1 if with_self else 0))
        try:
            sig.bind(*args, **{k: object() for k in kws})
        except TypeError as exc:
            return f"{name}{sig}: {exc}"
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            # **kwargs (pycuda's Function.__call__ pops the ones it knows): read the source.
            try:
                source = inspect.getsource(fn)
            except (OSError, TypeError):
                return f"{name}: takes **kwargs and its source is not available"
            unknown = [k for k in kws if f'"{k}"' not in source and f"'{k}'" not in source]
            if unknown:
                return f"{name}: does not take keyword(s) {unknown}"
        return None
    doc = getattr(fn, "__doc__", None) or ""
    overloads = _boost_overloads(doc, name.rsplit(".", 1)[-1])
    if not overloads:
        return f"{name}: no signature and no Boost.Python docstring"
    total = n_pos + (1 if with_self else 0)
    if any(_fits(p, total, kws) for p in overloads):
        return None
    return f"{name}: no overload takes {total} positional arguments and {kws} ({overloads})"


def _is_static(cls: Any, name: str) -> bool:
    for klass in getattr(cls, "__mro__", (cls,)):
        if name in vars(klass):
            return isinstance(vars(klass)[name], (staticmethod, classmethod))
    return False


def check(drv: Any) -> list[str]:
    """Everything in the surface that ``drv`` lacks or would refuse."""
    problems: list[str] = []
    for name, calls in surface.MODULE_FUNCTIONS.items():
        fn = getattr(drv, name, None)
        if fn is None:
            problems.append(f"missing function {name}")
            continue
        problems += [p for n, kw in calls if (p := call_ok(fn, n, kw, False, name))]
    for name, calls in surface.CONSTRUCTORS.items():
        cls = getattr(drv, name, None)
        if cls is None:
            problems.append(f"missing class {name}")
            continue
        for n, kw in calls:
            p = (
                call_ok(cls, n, kw, False, name)
                if _has_py_signature(cls)
                else call_ok(cls.__init__, n, kw, True, f"{name}.__init__")
            )
            if p:
                problems.append(p)
    for cname, methods in surface.CLASS_FUNCTIONS.items():
        cls = getattr(drv, cname, None)
        for mname, calls in methods.items():
            fn = getattr(cls, mname, None)
            if fn is None:
                problems.append(f"missing {cname}.{mname}")
                continue
            if not _is_static(cls, mname):
                problems.append(f"{cname}.{mname} is not a class-level function")
            problems += [p for n, kw in calls if (p := call_ok(fn, n, kw, False, f"{cname}.{mname}"))]
    for cname, methods in surface.INSTANCE_METHODS.items():
        cls = getattr(drv, cname, None)
        if cls is None:
            problems.append(f"missing class {cname}")
            continue
        for mname, calls in methods.items():
            fn = getattr(cls, mname, None)
            if fn is None:
                problems.append(f"missing {cname}.{mname}")
                continue
            problems += [p for n, kw in calls if (p := call_ok(fn, n, kw, True, f"{cname}.{mname}"))]
    for cname, props in surface.PROPERTIES.items():
        cls = getattr(drv, cname, None)
        problems += [f"missing property {cname}.{p}" for p in props if not isinstance(getattr(cls, p, None), property)]
    for group, names in surface.CONSTANTS.items():
        holder = getattr(drv, group, None)
        problems += [f"missing constant {group}.{n}" for n in names if not hasattr(holder, n)]
    for name in surface.EXCEPTIONS:
        exc = getattr(drv, name, None)
        if not (isinstance(exc, type) and issubclass(exc, BaseException)):
            problems.append(f"missing exception class {name}")
    if not issubclass(drv.MemoryError, drv.Error):
        problems.append("MemoryError does not derive from Error")
    return problems


def _has_py_signature(cls: Any) -> bool:
    try:
        inspect.signature(cls)
        return "Boost.Python" not in str(type(cls))
    except (TypeError, ValueError):
        return False


def member_names(drv: Any) -> dict[str, list[str]]:
    """Public member names of the classes the plugin uses."""
    out = {}
    for cname in CLASS_MEMBERS_OF_INTEREST:
        cls = getattr(drv, cname, None)
        out[cname] = sorted(n for n in dir(cls) if not n.startswith("_")) if cls is not None else []
    return out


if __name__ == "__main__":
    import pycuda.driver as cuda

    # Deliberately wrong calls: the checker must refuse each one (proof that it checks).
    negative = [
        call_ok(cuda.memcpy_htod, 5, (), False, "memcpy_htod"),
        call_ok(cuda.Module.get_function, 0, (), True, "Module.get_function"),
        call_ok(cuda.Event.record, 3, (), True, "Event.record"),
        call_ok(cuda.Function.prepared_async_call, 3, ("no_such_keyword",), True, "Function.prepared_async_call"),
    ]
    print(
        json.dumps(
            {
                "problems": check(cuda),
                "members": member_names(cuda),
                "negative": negative,
                "version": list(cuda.get_version()),
            }
        )
    )
    sys.exit(0)
