"""Every ``PYOFFLOAD_*`` environment variable, parsed in one place with typed parsing.

The core's own variables are declared in :data:`VARIABLES` (the user guide's table is generated
from it); backends read theirs through the same parsers (:func:`flag`, :func:`integer`,
:func:`choice`, :func:`text`), so every variable of the project follows one set of rules:

* booleans: ``1``, ``true``, ``yes``, ``on`` mean on; ``0``, ``false``, ``no``, ``off`` and the empty
  string mean off (case-insensitive); anything else is an :class:`~pyoffload.OffloadError` with
  ``INVALID_VALUE`` naming the variable and the value;
* integers accept ``0x``/``0o``/``0b`` prefixes and ``_`` separators; out-of-range values are
  refused the same way.

Variables are read when the runtime starts (``pyoffload.devices()`` and friends), not at import.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

from .errors import Errc, OffloadError

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def _bad(name: str, raw: str, expected: str) -> OffloadError:
    return OffloadError(f"{name}={raw!r}: expected {expected}", Errc.INVALID_VALUE)


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return None if value is None else value.strip()


def flag(name: str, default: bool = False) -> bool:
    """A boolean variable: unset gives ``default``."""
    raw = _raw(name)
    if raw is None:
        return default
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _bad(name, raw, "one of 1/true/yes/on or 0/false/no/off")


@overload
def integer(name: str, default: int, minimum: int = 0, maximum: int | None = None) -> int: ...
@overload
def integer(name: str, default: int | None, minimum: int = 0, maximum: int | None = None) -> int | None: ...


def integer(name: str, default: int | None, minimum: int = 0, maximum: int | None = None) -> int | None:
    """An integer variable in ``[minimum, maximum]``: unset or empty gives ``default``."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = int(raw, 0)
    except ValueError:
        raise _bad(name, raw, "an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise _bad(name, raw, f"an integer {bound}")
    return value


def choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (case-insensitive): unset or empty gives ``default``."""
    raw = _raw(name)
    if not raw:
        return default
    low = raw.lower()
    if low not in choices:
        raise _bad(name, raw, "one of " + ", ".join(choices))
    return low


@overload
def text(name: str, default: str) -> str: ...
@overload
def text(name: str, default: str | None = None) -> str | None: ...


def text(name: str, default: str | None = None) -> str | None:
    """A free-form string: unset gives ``default``."""
    raw = _raw(name)
    return default if raw is None else raw


def names(name: str) -> frozenset[str] | None:
    """A comma- or semicolon-separated list of names; unset gives ``None`` (no list at all)."""
    raw = _raw(name)
    if raw is None:
        return None
    return frozenset(n.strip() for n in raw.replace(";", ",").split(",") if n.strip())


DeviceSelector = dict[str, frozenset[int] | None]


def device_selector(name: str = "PYOFFLOAD_DEVICES") -> DeviceSelector | None:
    """``opencl:0,1;cuda:*`` -> ``{"opencl": {0, 1}, "cuda": None}`` (``None``: every device)."""
    raw = _raw(name)
    if not raw:
        return None
    selected: DeviceSelector = {}
    for term in raw.split(";"):
        term = term.strip()
        if not term:
            continue
        backend, _, ids = term.partition(":")
        backend, ids = backend.strip(), ids.strip() or "*"
        if not backend:
            raise _bad(name, raw, "terms like 'backend:0,1' or 'backend:*'")
        if ids == "*":
            selected[backend] = None
            continue
        try:
            selected[backend] = frozenset(int(i) for i in ids.split(","))
        except ValueError:
            raise _bad(name, raw, f"device ids in {term!r} to be integers or '*'") from None
    return selected


@dataclasses.dataclass(frozen=True)
class Variable:
    """One of the core's variables: its name, what it does, and how it is read."""

    name: str
    meaning: str
    read: Callable[[], Any]


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "PYOFFLOAD_PLUGINS",
        "allow-list of backends, comma-separated; the built-in host backend is always allowed, "
        "so an empty list means the host backend only",
        lambda: names("PYOFFLOAD_PLUGINS"),
    ),
    Variable(
        "PYOFFLOAD_DEVICES",
        "device selector per backend, e.g. `opencl:0,1;cuda:*`; backends not named keep no device "
        "(the host device is always kept)",
        device_selector,
    ),
    Variable(
        "PYOFFLOAD_TRACE",
        "log every hook call (structlog, logger `pyoffload`, level DEBUG)",
        lambda: flag("PYOFFLOAD_TRACE"),
    ),
    Variable(
        "PYOFFLOAD_POOL_THRESHOLD",
        "largest request (bytes) the caching allocator serves; unset: every size; 0: pool off",
        lambda: integer("PYOFFLOAD_POOL_THRESHOLD", None),
    ),
    Variable(
        "PYOFFLOAD_TRACK_ALLOCATIONS",
        "record where each allocation was made; report statistics and leaks (LeakWarning) at shutdown",
        lambda: flag("PYOFFLOAD_TRACK_ALLOCATIONS"),
    ),
    Variable(
        "PYOFFLOAD_CACHE_DIR",
        "where `build_program` keeps built images (default: the user cache directory)",
        lambda: text("PYOFFLOAD_CACHE_DIR"),
    ),
    Variable(
        "PYOFFLOAD_BUILD_CACHE",
        "`build_program` reuses cached images (default on; 0 builds every time)",
        lambda: flag("PYOFFLOAD_BUILD_CACHE", True),
    ),
    Variable(
        "PYOFFLOAD_EXIT_TIMEOUT",
        "seconds interpreter exit waits for a queue's unfinished work before leaking what it uses (default 10)",
        lambda: integer("PYOFFLOAD_EXIT_TIMEOUT", 10),
    ),
    Variable(
        "PYOFFLOAD_HOST_THREADS",
        "threads that run a data-parallel host kernel's work-groups, on the host backend's native pool "
        "(default: the CPUs this process may run on, `os.sched_getaffinity`)",
        lambda: integer("PYOFFLOAD_HOST_THREADS", None, minimum=1),
    ),
    Variable(
        "PYOFFLOAD_RUN_KNOWN_FAILURES",
        "run the conformance tests a backend declared as known failures instead of skipping them",
        lambda: flag("PYOFFLOAD_RUN_KNOWN_FAILURES"),
    ),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The core's variables, read once when a runtime starts."""

    plugins: frozenset[str] | None
    devices: DeviceSelector | None
    trace: bool
    pool_threshold: int | None
    track_allocations: bool

    @classmethod
    def from_environment(cls) -> Settings:
        return cls(
            plugins=names("PYOFFLOAD_PLUGINS"),
            devices=device_selector(),
            trace=flag("PYOFFLOAD_TRACE"),
            pool_threshold=integer("PYOFFLOAD_POOL_THRESHOLD", None),
            track_allocations=flag("PYOFFLOAD_TRACK_ALLOCATIONS"),
        )


def cache_dir() -> Path:
    """Where built images (and the host backend's native runtime) are kept: ``PYOFFLOAD_CACHE_DIR``,
    else the user cache directory."""
    override = text("PYOFFLOAD_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("pyoffload"))
