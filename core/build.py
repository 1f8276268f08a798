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
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import settings

if TYPE_CHECKING:
    import hashlib
from .backend import HOOK_API
from .errors import got


def _sha256(data: bytes) -> hashlib._Hash:
    """hashlib's SHA-256, imported on the first build (OpenSSL's start-up costs several ms of
    every process that only lists devices)."""
    import hashlib

    return hashlib.sha256(data)


FORMAT = 2  # bump when the meaning of a cache entry changes (2: entries carry a digest)
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


def cache_dir() -> Path:
    """Where built images are kept: ``PYOFFLOAD_CACHE_DIR``, else the user cache directory."""
    override = settings.text("PYOFFLOAD_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("pyoffload"))


def _key(device: Any, source: str, options: tuple[str, ...], compiler: str) -> str:
    parts = [
        FORMAT,
        list(HOOK_API),
        device.backend,
        device.platform.name,
        device.platform.version,
        device.name,
        compiler,
        list(options),
        source,
    ]
    import json  # here, not at the top: devices() imports this module, and startup needs no json

    return _sha256(json.dumps(parts).encode()).hexdigest()


def build(device: Any, source: Any, options: Sequence[str] = (), cache: bool = True) -> bytes:
    """The image of ``source`` built for ``device`` with ``options``, from the cache when it has it."""
    if isinstance(source, (bytes, bytearray)):
        source = bytes(source).decode()
    if not isinstance(source, str):
        raise TypeError(f"build_program takes the source as a str, got {got(source)}")
    if isinstance(options, str) or not all(isinstance(o, str) for o in options):
        raise TypeError(f"build_program options must be a sequence of str, got {got(options)}")
    opts = tuple(options)
    disp = device.disp
    compiler = disp.compiler_id_impl(device.handle) if cache and settings.flag("PYOFFLOAD_BUILD_CACHE", True) else None
    path = None
    if compiler:
        path = _path(device, source, opts, str(compiler))
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
    image = bytes(disp.compile_impl(device.handle, source, opts))
    with _lock:
        if path is None:
            stats.uncached += 1
        else:
            stats.misses += 1
    if path is not None:
        _store(path, image)
    return image


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
    compiler = device.disp.compiler_id_impl(device.handle)
    return _path(device, source, tuple(options), str(compiler)) if compiler else None


def _path(device: Any, source: str, options: tuple[str, ...], compiler: str) -> Path:
    key = _key(device, source, options, compiler)
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
