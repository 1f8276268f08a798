"""Building programs from source, with an on-disk cache (``Device.build_program``).

A backend builds its own source language (``compile_impl``: OpenCL C through the driver, C through
``cc`` on the host backend, CUDA C++, HIP) and names its toolchain (``compiler_id_impl``).  The
generic layer caches each built image under the user cache directory (``platformdirs``;
``PYOFFLOAD_CACHE_DIR`` overrides it, ``PYOFFLOAD_BUILD_CACHE=0`` turns it off), keyed by a
digest of the source, the options, the device and the toolchain, so that a change of any of them
builds anew and nothing stale is ever loaded.  Entries are written atomically: concurrent
processes building the same program each write a complete file or none.  Each entry carries the
SHA-256 of its image: an entry that a full disk, a crash of another writer or a stray edit left
truncated or garbled is discarded and rebuilt, never handed to the driver.

A backend that names build targets (``build_target_impl``: ``"host:x86_64"``, ``"cuda:sm_80"``)
also builds with no device (``target_compile_impl``): ``pyoffload.build_image`` compiles for a
target without initialising any driver, and a device's build goes the same way under the same
key, with the compiler the caller chose.  ``build_program`` keeps a table of the programs it
loaded per context, so the same build twice in a context loads once.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import settings
from .settings import cache_dir

if TYPE_CHECKING:
    import hashlib
from .backend import HOOK_API
from .errors import InvalidArgumentError, NotFoundError, UnsupportedError, got


def _sha256(data: bytes) -> hashlib._Hash:
    """hashlib's SHA-256, imported on the first build (OpenSSL's start-up costs several ms of
    every process that only lists devices)."""
    import hashlib

    return hashlib.sha256(data)


FORMAT = 3  # bump when the meaning of a cache entry changes (2: entries carry a digest; 3: target keys)
MAGIC = b"pyoffload-build\x00"  # then the image's SHA-256 (32 bytes), then the image
_HEADER = len(MAGIC) + 32


@dataclasses.dataclass
class CacheStats:
    """Builds served from the cache (``hits``) and built anew (``misses``) in this process."""

    hits: int = 0
    misses: int = 0
    uncached: int = 0
    discarded: int = 0  # entries found truncated or garbled (then rebuilt)


stats = CacheStats()
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    """An image built from source (``pyoffload.build``): load ``image`` later on any device whose
    ``target`` is ``target`` (``device.load_program(built.image)``).  ``key`` is the build cache's
    key (a SHA-256 hex digest of the source, options, target and toolchain), ``compiler`` the
    toolchain that built it."""

    image: bytes = dataclasses.field(repr=False)
    key: str
    target: str
    compiler: str


def _digest(parts: list[Any]) -> str:
    import json  # here, not at the top: devices() imports this module, and startup needs no json

    return _sha256(json.dumps([FORMAT, list(HOOK_API), *parts]).encode()).hexdigest()


def _machine_parts(options: tuple[str, ...]) -> list[str]:
    """The building CPU, where an option makes the image for it alone (``-march=native``,
    ``-mcpu=native``, ``-mtune=native``): a cache directory shared between machines (a network
    home) must not hand such an image to a CPU that lacks its instructions."""
    return [cpu_identity()] if any(o.endswith("=native") for o in options) else []


def cpu_identity() -> str:
    """What names this machine's CPU and its instruction set: /proc/cpuinfo's model and flags on
    Linux, the architecture elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [
                line for line in f.read(1 << 16).splitlines() if line.startswith(("model name", "flags", "Features"))
            ]
        if lines:
            return "\n".join(dict.fromkeys(lines))
    except OSError:
        pass
    import platform

    return platform.machine()


def _device_key(device: Any, source: Sources, options: tuple[str, ...], compiler: str) -> str:
    """The key of a build through ``compile_impl`` (a backend without build targets)."""
    platform = device.platform
    return _digest(
        [device.backend, platform.name, platform.version, device.name, compiler, list(options), source]
        + _machine_parts(options)
    )


def _target_key(target: str, source: Sources, options: tuple[str, ...], compiler: str) -> str:
    """The key of a build for a target: the same whether a device or ``pyoffload.build`` asked."""
    return _digest(["target", target, compiler, list(options), source] + _machine_parts(options))


Sources = str | tuple[str, ...]
"""One source, or several compiled each on its own and linked into one image."""


def _checked_input(source: Any, options: Any, compiler: Any) -> tuple[Sources, tuple[str, ...]]:
    if isinstance(source, (list, tuple)):
        if not source:
            raise InvalidArgumentError("build_program: an empty list of sources builds nothing")
        parts = tuple(_one_source(s) for s in source)
        checked: Sources = parts[0] if len(parts) == 1 else parts
    else:
        checked = _one_source(source)
    if isinstance(options, str) or not all(isinstance(o, str) for o in options):
        raise TypeError(f"build_program options must be a sequence of str, got {got(options)}")
    if compiler is not None and not isinstance(compiler, str):
        raise TypeError(f"build_program compiler must be a str (a name on PATH or a path) or None, got {got(compiler)}")
    return checked, tuple(options)


def _one_source(source: Any) -> str:
    if isinstance(source, (bytes, bytearray)):
        source = bytes(source).decode()
    if not isinstance(source, str):
        raise TypeError(f"build_program takes the source as a str (or a list of str to link), got {got(source)}")
    return source


def _unlinkable(where: str) -> UnsupportedError:
    return UnsupportedError(
        f"build_program of several sources: {where} cannot link separately compiled sources (see the guide's "
        "table of what each backend links); build them as one source"
    )


def _caching(cache: bool) -> bool:
    return cache and settings.flag("PYOFFLOAD_BUILD_CACHE", True)


def _cached(path: Path | None, compile_: Any) -> bytes:
    """The image in the cache entry at ``path``, else ``compile_()`` stored there."""
    if path is not None:
        try:
            entry = path.read_bytes()
        except OSError:
            pass
        else:
            image = _checked(entry)
            if image is not None:
                with _lock:
                    stats.hits += 1
                return image
            _discard(path)
    image = bytes(compile_())
    with _lock:
        if path is None:
            stats.uncached += 1
        else:
            stats.misses += 1
    if path is not None:
        _store(path, image)
    return image


def _backend_named(name: str) -> Any:
    """The dispatcher of the installed backend ``name`` (as ``PYOFFLOAD_PLUGINS`` allows it),
    loaded without initialising it or any driver; ``None`` where there is none."""
    from . import runtime as _runtime

    rt = _runtime.active()
    if rt is not None and rt.alive:
        for backend in rt.backends:  # started already: its dispatcher has the wrappers (tracing)
            if backend.name == name:
                return backend.dispatch
    with _lock:
        if name not in _offline:
            from .hooks.discovery import HOST_BACKEND, entry_points, load_backends
            from .settings import Settings

            allow = Settings.from_environment().plugins
            if allow is not None and name not in allow and name != HOST_BACKEND:
                _offline[name] = None
            else:
                # Only that plugin's module is imported: another's import may start its runtime.
                found = [entry for entry in entry_points() if entry[0] == name]
                backends, _ = load_backends(None, lambda _name: [], found)
                _offline[name] = backends[0].dispatch if backends else None
        return _offline[name]


_offline: dict[str, Any] = {}  # backends by name for builds without a device (guarded by _lock)


def _build_for_target(
    disp: Any, target: str, source: Sources, options: tuple[str, ...], compiler: str | None, cache: bool
) -> BuiltImage | None:
    """``source`` built for ``target`` through ``disp``'s ``target_compile_impl`` (several
    sources: ``target_link_impl``), from the cache when it has it; ``None`` where that backend
    builds nothing for ``target`` without a device."""
    ident = disp.target_compiler_id_impl(target, compiler)
    if ident is None:
        return None
    key = _target_key(target, source, options, str(ident))
    path = _entry(key) if _caching(cache) else None

    def compile_() -> bytes:
        if isinstance(source, tuple):
            image = disp.target_link_impl(target, source, options, compiler)
            if image is None:
                raise _NoLink
        else:
            image = disp.target_compile_impl(target, source, options, compiler)
            if image is None:
                raise UnsupportedError(f"the backend of target {target!r} builds nothing for it without a device")
        return image  # type: ignore[no-any-return]

    try:
        return BuiltImage(_cached(path, compile_), key, target, str(ident))
    except _NoLink:
        return None


class _NoLink(Exception):
    """The backend of a target links nothing without a device (``target_link_impl`` gave ``None``)."""


def build_image(
    source: str | Sequence[str],
    target: str,
    compiler: str | None = None,
    options: Sequence[str] = (),
    cache: bool = True,
) -> BuiltImage:
    """Build ``source`` for ``target`` with no device opened and no driver initialised (a
    framework's compile step, a process pool of compilers); load ``.image`` later on a device
    whose ``Device.target`` is ``target``.

    ``target`` is what ``Device.target`` says (``"host:x86_64"``, ``"cuda:sm_80"``,
    ``"amdgpu:gfx90a"``): the backend is the part before the colon.  ``compiler`` picks the
    compiler (a name on ``PATH`` or a path; ``None``: the backend's default), ``options`` are
    compiler options after the backend's own.  Built images are cached on disk as
    ``build_program``'s are, under the same key.  An unknown backend is ``NOT_FOUND``; a backend
    that builds only with its device (OpenCL: the driver compiles) ``UNSUPPORTED``; a target the
    backend does not know ``INVALID_ARGUMENT``; a compiler it cannot use ``UNSUPPORTED``; a
    missing compiler ``HOST_TOOL_NOT_FOUND``."""
    source, opts = _checked_input(source, options, compiler)
    if not isinstance(target, str):
        raise TypeError(f"build: target must be a str such as Device.target gives, got {got(target)}")
    name = target.partition(":")[0]
    disp = _backend_named(name)
    if disp is None:
        raise NotFoundError(
            f"build: no backend {name!r} for target {target!r} (an installed plugin that PYOFFLOAD_PLUGINS allows; "
            "targets look like Device.target, e.g. 'host:x86_64', 'cuda:sm_80')"
        )
    built = _build_for_target(disp, target, source, opts, compiler, cache)
    if built is None and isinstance(source, tuple):
        raise _unlinkable(f"the {name} backend (without a device)")
    if built is None:
        raise UnsupportedError(
            f"build: the {name} backend builds only with its device (its driver compiles); use Device.build_program"
        )
    return built


def build_device(
    device: Any, source: Any, options: Sequence[str] = (), cache: bool = True, compiler: str | None = None
) -> BuiltImage:
    """``source`` built for ``device`` with ``options`` and ``compiler``, from the cache when it
    has it: for the device's target where it has one (the same image and key as
    ``pyoffload.build(source, target=device.target)``), else through the device's own
    ``compile_impl`` (which takes no compiler choice: ``UNSUPPORTED`` for one).  Several sources
    are compiled each on its own and linked: ``target_link_impl``, else the device's
    ``link_impl``, else ``UNSUPPORTED``."""
    source, opts = _checked_input(source, options, compiler)
    target = device.target
    if target is not None:
        name = target.partition(":")[0]
        # A remote device's target names a local backend (the image is built here, loaded there).
        disp = device.disp if name == device.backend else _backend_named(name)
        if disp is not None:
            built = _build_for_target(disp, target, source, opts, compiler, cache)
            if built is not None:
                return built
    if compiler is not None:
        raise UnsupportedError(
            f"build_program on {device.id}: the {device.backend} backend builds with its driver's own compiler; "
            f"compiler={compiler!r} cannot be chosen"
        )
    disp = device.disp
    ident = disp.compiler_id_impl(device.handle) if _caching(cache) else None
    key = _device_key(device, source, opts, str(ident))
    path = _entry(key) if ident else None

    def compile_() -> bytes:
        if not isinstance(source, tuple):
            return disp.compile_impl(device.handle, source, opts)  # type: ignore[no-any-return]
        image = disp.link_impl(device.handle, source, opts)
        if image is None:
            raise _unlinkable(f"the {device.backend} backend ({device.id})")
        return image  # type: ignore[no-any-return]

    image = _cached(path, compile_)
    return BuiltImage(image, key, str(target or device.backend), str(ident))


def build(
    device: Any, source: Any, options: Sequence[str] = (), cache: bool = True, compiler: str | None = None
) -> bytes:
    """The image of ``source`` built for ``device`` with ``options``, from the cache when it has it."""
    return build_device(device, source, options, cache, compiler).image


def build_program(
    device: Any, context: Any, source: Any, options: Sequence[str], cache: bool, compiler: str | None
) -> Any:
    """``Device.build_program``: the program already built from the same source, options and
    compiler in ``context`` while it is loaded (no second load, no second build), else a build
    and a load."""
    from .program import Program  # program.py's imports reach this module through api.py

    source, opts = _checked_input(source, options, compiler)
    key = (id(context), id(device), source, opts, compiler)
    with _lock:
        found = _loaded.get(key)
    if found is not None and found.loaded and found.context is context and found.device is device:
        return found
    prog = Program(context, device, build(device, source, opts, cache, compiler))
    with _lock:
        _loaded[key] = prog
    return prog


# Programs built per (context, device, source, options, compiler); weak: the context holds a
# program while it is loaded, and an unloaded one is never handed out again.  Guarded by _lock.
_loaded: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()


def _checked(entry: bytes) -> bytes | None:
    """The image an entry holds, or ``None`` when the entry is not whole (wrong header, cut
    short, extended or changed: its digest does not match)."""
    if len(entry) <= _HEADER or not entry.startswith(MAGIC):
        return None
    image = entry[_HEADER:]
    if _sha256(image).digest() != entry[len(MAGIC) : _HEADER]:
        return None
    return image


def _discard(path: Path) -> None:
    with _lock:
        stats.discarded += 1
    try:
        path.unlink()
    except OSError:
        pass  # another process removed or replaced it; the rebuild below rewrites it anyway


def _store(path: Path, image: bytes) -> None:
    import tempfile  # here, not at the top: as json above

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + _sha256(image).digest() + image)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache directory costs a rebuild next time, nothing else


def entry_path(device: Any, source: str, options: Sequence[str] = ()) -> Path | None:
    """Where the cache keeps ``source`` built for ``device`` with ``options`` (``None`` where
    the backend names no toolchain and nothing is cached): for tools and tests."""
    opts = tuple(options)
    target = device.target
    if target is not None:
        name = target.partition(":")[0]
        disp = device.disp if name == device.backend else _backend_named(name)
        ident = disp.target_compiler_id_impl(target, None) if disp is not None else None
        if ident is not None:
            return _entry(_target_key(target, source, opts, str(ident)))
    compiler = device.disp.compiler_id_impl(device.handle)
    return _entry(_device_key(device, source, opts, str(compiler))) if compiler else None


def _entry(key: str) -> Path:
    return cache_dir() / "programs" / key[:2] / f"{key}.bin"


def clear_cache() -> int:
    """Delete every cached image; the number of files removed."""
    root = cache_dir() / "programs"
    removed = 0
    for entry in root.glob("*/*.bin"):
        try:
            entry.unlink()
            removed += 1
        except OSError:
            pass
    return removed
